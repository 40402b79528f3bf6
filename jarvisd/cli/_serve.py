"""``jarvis serve-model``: the Ollama HTTP API over the embedded llama.cpp engine."""

from __future__ import annotations

import click


@click.command("serve-model")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=11434, show_default=True, type=int, help="Port (0: any free port).")
@click.option("-m", "--model", "models", multiple=True,
              help="Catalog name or .gguf path to serve (repeatable; default: config).")  # fmt: skip
@click.option("--n-ctx", type=int, default=None, help="Context window (default: config).")
@click.option("--allow-origin", "origins", multiple=True, envvar="JARVIS_ORIGINS",
              help="Extra browser Origin to answer, e.g. 'https://app.example' or "
                   "'chrome-extension://*' (repeatable; env JARVIS_ORIGINS, space-separated).")  # fmt: skip
def serve_model(
    host: str, port: int, models: tuple[str, ...], n_ctx: int | None, origins: tuple[str, ...]
) -> None:
    """Serve local models over the Ollama API (/api/chat, /api/generate, /api/tags,
    /api/show, /api/ps) and the OpenAI API (/v1/chat/completions, /v1/models). Any
    Ollama or OpenAI client (or `jarvis ask --engine ollama`) can then use them with no
    Ollama installed. Models load on first use, one at a time.

    As Ollama does, requests are refused (403) unless their Host is a loopback name or
    the listening address, and unless their Origin, when a browser sends one, is a
    loopback page or an --allow-origin.
    """
    from .._config import load_config
    from ..catalog import strongest_model
    from ..engines._llamacpp import LlamaCppPool
    from ..server import OllamaServer

    cfg = load_config().engine.llamacpp
    pool = LlamaCppPool(
        list(models) or [cfg.model or strongest_model().name],
        n_ctx=n_ctx or cfg.n_ctx,
        n_threads=cfg.n_threads,
    )
    server = OllamaServer(pool, host, port, origins=origins)
    server.start()
    click.echo(f"serving {', '.join(pool.names)} on {server.url} (Ctrl-C to stop)", err=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        click.echo("stopping", err=True)
    finally:
        server.stop()
