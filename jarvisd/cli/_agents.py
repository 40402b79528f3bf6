"""``jarvis agents``: the agents this installation knows."""

from __future__ import annotations

import json
from typing import Any

import click


def agent_rows() -> list[dict[str, Any]]:
    from .._config import load_config
    from ..agents import AgentRegistry
    from ..agents._claude_code import key_mode
    from ..agents._registry import ALIASES
    from ..runs import declared_options

    mode = key_mode(load_config())
    rows = []
    for key in AgentRegistry.keys():  # noqa: SIM118 - a classmethod, not a dict
        cls = AgentRegistry.get(key)
        import sys

        doc = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
        rows.append({
            "key": key,
            "alias_of": ALIASES.get(key),
            "class": f"{cls.__module__}:{cls.__qualname__}",
            "accepts_tools": cls.accepts_tools,
            "description": doc[0].strip() if doc else "",
            "options": {
                name: {"type": option.describe().partition(" (")[2].rstrip(")"),
                       "default": option.default}
                for name, option in declared_options(cls).items()
            },
            **({"mode": mode} if key == "claude_code" else {}),
        })  # fmt: skip
    return rows


@click.group()
def agents() -> None:
    """List the agents, whether they accept tools, and their options."""


@agents.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_agents(as_json: bool) -> None:
    """Every agent key, whether it accepts --tools, and the options it declares
    (set them with `jarvis ask --option KEY=VALUE`)."""
    rows = agent_rows()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        tools = "tools" if row["accepts_tools"] else "-"
        alias = f" (alias of {row['alias_of']})" if row["alias_of"] else ""
        click.echo(f"{row['key']:<18} {tools:<6} {row['description']}{alias}")
        if row["key"] == "claude_code":
            click.echo(f"{'':<25} model: {row['mode']}")
        if row["options"]:
            options = ", ".join(
                f"{name}={option['default']!r} ({option['type']})"
                for name, option in row["options"].items()
            )
            click.echo(f"{'':<25} options: {options}")


#: Agents that live in an environment of their own, and the function that installs it.
INSTALLERS = {
    "openhands": "jarvisd.agents._openhands_venv:ensure_venv",
    "claude_code": "jarvisd.agents._claude_code_install:ensure_sdk",
}


@agents.command("install")
@click.argument("name", type=click.Choice(sorted(INSTALLERS)))
def install_agent(name: str) -> None:
    """Install agent NAME's own environment now (otherwise its first run does), with
    progress. openhands: a Python >= 3.12 venv with openhands-sdk (about 3 minutes);
    claude_code: the Claude Agent SDK from npm (pinned)."""
    from .._plugins import import_from_string

    install = import_from_string(INSTALLERS[name])
    path = install(lambda line: click.echo(line, err=True))
    click.echo(f"{name}: ready ({path})")
