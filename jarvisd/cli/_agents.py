"""``jarvis agents``: the agents this installation knows."""

from __future__ import annotations

import json
from typing import Any

import click


def agent_rows() -> list[dict[str, Any]]:
    from .._config import load_config
    from ..agents import AgentRegistry
    from ..agents._registry import ALIASES
    from ..external import ExternalAgent, external_agent_class, installed
    from ..external._claude_code import key_mode
    from ..runs import declared_options

    config = load_config()
    mode = key_mode(config)
    rows = []
    classes = {key: AgentRegistry.get(key) for key in AgentRegistry.keys()}  # noqa: SIM118
    for name in config.agents.external:
        found = external_agent_class(name, config)
        if found is not None:
            classes[name] = found
    for key, cls in sorted(classes.items()):
        import sys

        doc = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
        rows.append(
            {
                "key": key,
                "alias_of": ALIASES.get(key),
                "class": f"{cls.__module__}:{cls.__qualname__}",
                "accepts_tools": cls.accepts_tools,
                "description": doc[0].strip() if doc else "",
                "options": {
                    name: {
                        "type": option.describe().partition(" (")[2].rstrip(")"),
                        "default": option.default,
                    }
                    for name, option in declared_options(cls).items()
                },
                # External agents: None for the others.
                "installed": installed(cls.definition) if issubclass(cls, ExternalAgent) else None,
                **({"mode": mode} if key == "claude_code" else {}),
            }
        )
    return rows


@click.group()
def agents() -> None:
    """List the agents, whether they accept tools, and their options; install the
    external agents (opencode, codex, claude, gemini)."""


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
        state = {True: " [installed]", False: " [not installed]", None: ""}[row["installed"]]
        click.echo(f"{row['key']:<18} {tools:<6} {row['description']}{alias}{state}")
        if row["key"] == "claude_code":
            click.echo(f"{'':<25} model: {row['mode']}")
        if row["options"]:
            options = ", ".join(
                f"{name}={option['default']!r} ({option['type']})"
                for name, option in row["options"].items()
            )
            click.echo(f"{'':<25} options: {options}")


@agents.command("install")
@click.argument("names", nargs=-1, required=True)
def install_agents(names: tuple[str, ...]) -> None:
    """Install agents NAMES now (otherwise a first run does), with progress.
    opencode, codex, claude, gemini: their pinned npm packages, with `npm ci`, into the
    cache (JARVIS_AGENTS_DIR to move it); claude_code: the Claude Agent SDK from npm
    (pinned); openhands: a Python >= 3.12 venv with openhands-sdk (about 3 minutes).
    Needs npm and the npm registry (openhands: PyPI)."""
    from .._errors import UsageError
    from .._plugins import import_from_string
    from ..agents._installers import INSTALLERS
    from ..external import BUILTIN, install, installed

    for name in names:
        if name not in BUILTIN and name not in INSTALLERS:
            known = ", ".join([*BUILTIN, *sorted(INSTALLERS)])
            raise UsageError(f"{name!r} is not an installable agent ({known})")
    for name in names:
        if name in INSTALLERS:
            path = import_from_string(INSTALLERS[name])(lambda line: click.echo(line, err=True))
            click.echo(f"{name}: ready ({path})")
            continue
        agent = BUILTIN[name]
        if installed(agent):
            click.echo(f"{name}: already installed")
            continue
        where = install(agent, progress=lambda line: click.echo(line, err=True))
        click.echo(f"{name}: installed in {where}")
