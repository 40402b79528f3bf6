"""``jarvis serve-model``: the Ollama HTTP API over the embedded llama.cpp engine;
``jarvis serve``: the same server, with jarvis's agents and teams as models too."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from .._config import Config
    from ..engines._llamacpp import LlamaCppPool


@click.command("serve-model")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=11434, show_default=True, type=int, help="Port (0: any free port).")
@click.option(
    "-m",
    "--model",
    "models",
    multiple=True,
    help="Catalog name or .gguf path to serve (repeatable; default: config).",
)
@click.option("--n-ctx", type=int, default=None, help="Context window (default: config).")
@click.option(
    "--allow-origin",
    "origins",
    multiple=True,
    envvar="JARVIS_ORIGINS",
    help="Extra browser Origin to answer, e.g. 'https://app.example' or "
    "'chrome-extension://*' (repeatable; env JARVIS_ORIGINS, space-separated).",
)
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
    from ..http.serve import OllamaServer

    pool = _pool(load_config(), models, n_ctx)
    server = OllamaServer(pool, host, port, origins=origins)
    _run(server, f"serving {', '.join(pool.names)}")


def _pool(config: Config, models: tuple[str, ...], n_ctx: int | None) -> LlamaCppPool:
    from ..catalog import strongest_model
    from ..engines._llamacpp import LlamaCppPool

    cfg = config.engine.llamacpp
    return LlamaCppPool(
        list(models) or [cfg.model or strongest_model().name],
        n_ctx=n_ctx or cfg.n_ctx,
        n_threads=cfg.n_threads,
    )


def _run(server: Any, what: str) -> None:
    server.start()
    click.echo(f"{what} on {server.url} (Ctrl-C to stop)", err=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        click.echo("stopping", err=True)
    finally:
        server.stop()


def server_token(given: str | None) -> tuple[str, Path | None]:
    """The token ``jarvis serve`` asks of every request: ``given`` (--token, env
    JARVIS_SERVE_TOKEN), else the one in ``serve.token`` of the state directory, made
    (random, 0600) the first time, so clients keep working across restarts."""
    import secrets

    from .._errors import UsageError
    from .._paths import paths

    if given is not None:
        given = given.strip()
        if len(given) < 16 or not given.isascii() or not given.isprintable() or " " in given:
            raise UsageError("--token must be at least 16 printable ASCII characters, no spaces")
        return given, None
    path = paths().state / "serve.token"
    if kept := _kept_token(path):
        return kept, path
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_urlsafe(32)
    # Written aside, then put in place whole: a client that finds the file (the tests,
    # a script waiting for the server) never reads it empty, and of two first starts
    # one token wins and both serve it.
    aside = path.with_name(f".serve.token.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write(token + "\n")
        try:
            os.link(aside, path)
        except FileExistsError:
            if kept := _kept_token(path):
                return kept, path
            os.replace(aside, path)  # a short or unreadable one: replaced
    finally:
        aside.unlink(missing_ok=True)
    return token, path


def _kept_token(path: Path) -> str | None:
    try:
        token = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return token if len(token) >= 16 else None


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=11434, show_default=True, type=int, help="Port (0: any free port).")
@click.option(
    "-m",
    "--model",
    "models",
    multiple=True,
    help="Catalog name or .gguf path to serve and to run the agents on "
    "(repeatable; default: config; the first is the agents' model).",
)
@click.option("--n-ctx", type=int, default=None, help="Context window (default: config).")
@click.option(
    "--agents",
    "agents",
    default="",
    help="Comma-separated agents to serve as agent:NAME (default: simple,orchestrator,react,rlm).",
)
@click.option(
    "--teams",
    "teams_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="A directory of team files (*.toml): each served as team:FILE-STEM.",
)
@click.option(
    "-t", "--tools", default="", help="Comma-separated tools for the served agents that take tools."
)
@click.option(
    "--sandbox", is_flag=True, help="Run every served agent in a network-disabled container."
)
@click.option(
    "--token",
    default=None,
    envvar="JARVIS_SERVE_TOKEN",
    help="The bearer token clients must send (env JARVIS_SERVE_TOKEN; default: "
    "one made once and kept in the state directory's serve.token).",
)
@click.option(
    "--allow-origin",
    "origins",
    multiple=True,
    envvar="JARVIS_ORIGINS",
    help="Extra browser Origin to answer (repeatable; env JARVIS_ORIGINS).",
)
def serve(
    host: str,
    port: int,
    models: tuple[str, ...],
    n_ctx: int | None,
    agents: str,
    teams_dir: str | None,
    tools: str,
    sandbox: bool,
    token: str | None,
    origins: tuple[str, ...],
) -> None:
    """Serve jarvis's agents and teams as models on the OpenAI API, beside the local
    models (everything `jarvis serve-model` serves, the same server).

    /v1/models lists agent:NAME and team:NAME; a /v1/chat/completions request for one
    runs that agent or team on the served model, as `jarvis ask` would: its tools run
    here, its answer streams back, usage is the whole run's, and a client that hangs up
    cancels the run (its containers too). See docs/serving.md, "Agents as models".

    Every request must carry `Authorization: Bearer TOKEN` (the token is printed at
    start); Host and Origin are checked as by serve-model.
    """
    from .._config import load_config
    from ..http.serve import OllamaServer, ServedAgents

    config = load_config()
    served = ServedAgents.load(
        config, agents.split(","), teams_dir, tools=tools.split(","), sandbox=sandbox
    )
    secret, where = server_token(token)
    pool = _pool(config, models, n_ctx)
    server = OllamaServer(pool, host, port, origins=origins, agents=served, token=secret)
    if where is not None:
        click.echo(f"token: {secret} (kept in {where})", err=True)
    names = ", ".join([*pool.names, *served.model_names()])
    _run(server, f"serving {names}")
