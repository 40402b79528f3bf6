"""The MCP tools of one run: the servers its tool names need, started once, stopped
when the run ends, and each server tool as a jarvis tool named ``SERVER.tool``.

Tool names a run may give: ``SERVER.tool`` (one tool) or ``SERVER.*`` (all of them).
A server no name of the run mentions is never started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from .._errors import UsageError
from .._messages import ToolResult, ToolSpec
from ..tools import BaseTool
from ._client import McpServer, McpToolInfo

if TYPE_CHECKING:
    from .._config import Config
    from ..executors import CodeExecutor

__all__ = ["McpTool", "McpToolset", "mcp_server_of"]

#: Seconds the executor waits past a server's own call timeout: the server's timeout
#: fires first, and stops the server, with the clearer message.
_TIMEOUT_MARGIN_S = 5.0


def mcp_server_of(name: str, config: Config) -> str | None:
    """The configured server tool name ``name`` belongs to (``SERVER.tool``), or None."""
    server, dot, tool = name.strip().partition(".")
    if dot and tool and server in config.mcp.servers:
        return server
    return None


class McpTool(BaseTool):
    """Tool ``info`` of ``server``, under the name ``SERVER.tool``."""

    tool_id: ClassVar[str] = "mcp"

    def __init__(self, server: McpServer, info: McpToolInfo) -> None:
        self.server = server
        self.info = info
        self.timeout = server.config.timeout + _TIMEOUT_MARGIN_S

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=f"{self.server.name}.{self.info.name}",
            description=self.info.description
            or f"{self.info.name} (MCP server {self.server.name})",
            parameters=self.info.input_schema,
        )

    async def execute(self, **params: Any) -> ToolResult:
        text, is_error = await self.server.call(self.info.name, params)
        return ToolResult(self.spec.name, text, success=not is_error)


class McpToolset:
    """Servers of ``config`` for one run. ``async with`` stops every server started."""

    def __init__(self, config: Config, executor: CodeExecutor | None = None) -> None:
        self.config = config
        self.executor = executor
        self.servers: dict[str, McpServer] = {}

    def _server(self, name: str) -> McpServer:
        server = self.servers.get(name)
        if server is None:
            executor = self.executor or _host_executor()
            server = McpServer(name, self.config.mcp.servers[name], executor)
            self.servers[name] = server
        return server

    async def tools(self, names: Iterable[str]) -> list[BaseTool]:
        """The MCP tools ``names`` asks for (names of no server are ignored), starting
        the servers they need, concurrently. McpError when one cannot start;
        UsageError for a tool its server does not have."""
        wanted: dict[str, list[str]] = {}
        for raw in names:
            owner = mcp_server_of(raw, self.config)
            if owner is not None:
                wanted.setdefault(owner, []).append(raw.strip().partition(".")[2])
        servers = [self._server(name) for name in wanted]
        await asyncio.gather(*(server.start() for server in servers))
        tools: list[BaseTool] = []
        for server in servers:
            tools.extend(_pick(server, wanted[server.name]))
        return tools

    async def aclose(self) -> None:
        await asyncio.gather(*(server.aclose() for server in self.servers.values()))

    async def __aenter__(self) -> McpToolset:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _pick(server: McpServer, wanted: Sequence[str]) -> list[BaseTool]:
    by_name: Mapping[str, McpToolInfo] = {info.name: info for info in server.tools}
    if "*" in wanted:
        return [McpTool(server, info) for info in server.tools]
    picked: list[BaseTool] = []
    for name in dict.fromkeys(wanted):
        if name not in by_name:
            known = ", ".join(by_name) or "none"
            raise UsageError(f"MCP server {server.name!r} has no tool {name!r} (it has: {known})")
        picked.append(McpTool(server, by_name[name]))
    return picked


def _host_executor() -> CodeExecutor:
    """Servers of an unsandboxed run: host processes in a session of their own, with a
    minimal environment and rlimits (roomier than code's: a Node server maps gigabytes
    of address space), killed with their process group when the run ends."""
    from ..executors._subprocess import Limits, SubprocessExecutor

    return SubprocessExecutor(Limits(memory_bytes=16 * 1024**3, processes=256))
