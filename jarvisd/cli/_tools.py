"""``jarvis tools``: list the tools, run one directly."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from .._config import Config


@click.group()
def tools() -> None:
    """List tools and try one directly."""


@tools.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with parameter schemas).")
def list_tools(as_json: bool) -> None:
    """Every tool with its description; the tools of each MCP server of the config as
    SERVER.tool (each server is started to ask, then stopped)."""
    from .._config import load_config
    from ..engines import ScriptedEngine
    from ..tools import ToolRegistry

    config = load_config()
    rows: list[dict[str, object]] = []
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
    failed = _mcp_rows(config, rows) if config.mcp.servers else []
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        for row in rows:
            click.echo(f"{row['name']!s:<12} {row['description']}")
    for message in failed:
        click.echo(f"warning: {message}", err=True)


def _mcp_rows(config: Config, rows: list[dict[str, object]]) -> list[str]:
    """Append the tools of every configured MCP server to ``rows``; returns why the
    servers that could not be asked failed (one line each)."""
    import asyncio

    from ..mcp import McpError, McpToolset

    async def ask() -> list[str]:
        failed = []
        async with McpToolset(config) as toolset:
            for name in config.mcp.servers:
                try:
                    tools = await toolset.tools([f"{name}.*"])
                except McpError as exc:
                    failed.append(str(exc))
                    continue
                for tool in tools:
                    spec = tool.spec
                    rows.append(
                        {
                            "name": spec.name,
                            "description": spec.description,
                            "parameters": dict(spec.parameters),
                        }
                    )
        return failed

    return asyncio.run(ask())


@tools.command("run")
@click.argument("name")
@click.argument("arguments", default="{}")
@click.option("--json", "as_json", is_flag=True, help="Print the whole ToolResult as JSON.")
def run_tool(name: str, arguments: str, as_json: bool) -> None:
    """Run tool NAME with ARGUMENTS (JSON; repaired like a model's). Exit 1 on failure."""
    import asyncio

    from .._config import load_config
    from .._messages import ToolCall, ToolResult
    from ..tools import ToolDispatcher, build_tools

    config = load_config()
    engine = None
    if name == "llm":
        from ..engines import select_engine

        engine = select_engine(config, None, "")

    async def run() -> ToolResult:
        from ..mcp import McpToolset, mcp_server_of

        async with McpToolset(config) as toolset:
            if mcp_server_of(name, config) is not None:
                tool_list = await toolset.tools([name])
            else:
                tool_list = build_tools([name], config, engine)
            executor = ToolDispatcher(tool_list, timeout=config.tools.timeout)
            return await executor.execute(ToolCall(name, arguments))

    result = asyncio.run(run())
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        click.echo(result.content)
    if not result.success:
        raise ToolRunFailed(f"tool {name} failed")


class ToolRunFailed(click.exceptions.Exit):
    def __init__(self, message: str) -> None:
        super().__init__(1)
