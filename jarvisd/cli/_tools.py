"""``jarvis tools``: list the tools, run one directly."""

from __future__ import annotations

import json

import click


@click.group()
def tools() -> None:
    """List tools and try one directly."""


@tools.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with parameter schemas).")
def list_tools(as_json: bool) -> None:
    """Every tool with its description."""
    from .._config import load_config
    from ..engines import ScriptedEngine
    from ..tools import ToolRegistry

    config = load_config()
    rows = []
    for name in ToolRegistry.keys():  # noqa: SIM118 - a classmethod, not a dict
        # A placeholder engine: listing must not start a model.
        spec = ToolRegistry.create(name, config, ScriptedEngine()).spec
        rows.append(
            {
                "name": spec.name,
                "description": spec.description,
                "parameters": dict(spec.parameters),
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        click.echo(f"{row['name']:<12} {row['description']}")


@tools.command("run")
@click.argument("name")
@click.argument("arguments", default="{}")
@click.option("--json", "as_json", is_flag=True, help="Print the whole ToolResult as JSON.")
def run_tool(name: str, arguments: str, as_json: bool) -> None:
    """Run tool NAME with ARGUMENTS (JSON; repaired like a model's). Exit 1 on failure."""
    import asyncio

    from .._config import load_config
    from .._messages import ToolCall
    from ..tools import ToolExecutor, build_tools

    config = load_config()
    engine = None
    if name == "llm":
        from ..engines import select_engine

        engine = select_engine(config, None, "")
    tool_list = build_tools([name], config, engine)
    result = asyncio.run(
        ToolExecutor(tool_list, timeout=config.tools.timeout).execute(ToolCall(name, arguments))
    )
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(result.content)
    if not result.success:
        raise ToolRunFailed(f"tool {name} failed")


class ToolRunFailed(click.exceptions.Exit):
    def __init__(self, message: str) -> None:
        super().__init__(1)
