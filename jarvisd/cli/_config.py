"""``jarvis config``: where configuration lives and what it says."""

from __future__ import annotations

import json

import click


@click.group()
def config() -> None:
    """Show the configuration and where it lives."""


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(as_json: bool) -> None:
    """Print the effective configuration (file values over defaults).

    A bad file is reported with its path, the key and what was expected.
    """
    from .._config import load_config

    cfg = load_config()
    data = cfg.to_dict()
    if as_json:
        click.echo(json.dumps({"source": cfg.source, "config": data}, indent=2))
        return
    click.echo(f"# source: {cfg.source or 'defaults (no config file)'}")
    click.echo(_to_toml(data))


@config.command("path")
@click.option("--json", "as_json", is_flag=True, help="Print JSON with every directory.")
def path(as_json: bool) -> None:
    """Print the config file's path (with --json: every directory jarvis uses)."""
    from .._paths import paths

    p = paths()
    if as_json:
        click.echo(json.dumps(p.as_dict(), indent=2))
    else:
        click.echo(str(p.config_file))


def _to_toml(data: dict[str, object], prefix: str = "") -> str:
    scalars, tables = [], []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            scalars.append(
                f"{key} = {json.dumps(list(value) if isinstance(value, tuple) else value)}"
            )
    out = []
    if scalars:
        if prefix:
            out.append(f"[{prefix}]")
        out.extend(scalars)
        out.append("")
    for key, value in tables:
        out.append(_to_toml(value, f"{prefix}.{key}" if prefix else key))
    return "\n".join(out)
