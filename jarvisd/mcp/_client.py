"""One stdio MCP server for one run: started through a code executor, spoken to with the
``mcp`` package's ``ClientSession``, stopped (its whole process group, or its sandbox)
at the end.

The transport is ours, not ``mcp.client.stdio``: the server runs through the executor
seam (``jarvisd.executors``: a new session and process group, a minimal environment,
rlimits, or a sandbox backend), and every line it writes is read with a byte limit, so
a server that never writes a newline costs a bounded buffer, not the host's memory.
A server is hostile input: whatever it sends is parsed once here, and whatever goes
wrong (it exits, hangs, answers garbage) is an :class:`McpError` with one clear line;
a server the sandbox cannot start for want of its program says where the program must
be. The sandbox's own refusals (a mount, no engine) keep their class, server named.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import JarvisError, MountRefused, SandboxUnavailable, ToolError

if TYPE_CHECKING:
    from mcp import ClientSession

    from .._config import McpServerConfig
    from ..executors import Channel, CodeExecutor

__all__ = ["MAX_LINE_BYTES", "McpError", "McpServer", "McpToolInfo"]

log = logging.getLogger(__name__)

#: The longest JSON-RPC line a server may send (a tool result included).
MAX_LINE_BYTES = 4 * 1024 * 1024
#: A server lives as long as its run; the executor's own timeout is only a backstop.
_LIFETIME_S = 24 * 3600.0
#: Most tools taken from one server (a server listing thousands is refused past this).
MAX_TOOLS = 256
#: A tool name a model can write back (``SERVER.`` goes in front of it).
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: Characters of a tool's description shown to the model.
MAX_DESCRIPTION = 2000
#: Pages of ``tools/list`` followed before giving up on a server that never ends them.
_MAX_PAGES = 32
#: How a backend says a program (or the file it was told to run) is not there: the
#: engine's exec, bubblewrap's execvp, the sandbox prelude's, python3's own.
_MISSING = re.compile(
    r"executable file not found|no such file or directory|can't open file|no module named",
    re.IGNORECASE,
)
#: A command that is a Python interpreter by path: the sandbox runs its own python3.
_HOST_PYTHON = re.compile(r"python(?:\d+(?:\.\d+)?)?")


class McpError(ToolError):
    """An MCP server could not be started, or failed a request; the message says which
    server and what happened, for the model or the user."""


@dataclass(frozen=True, slots=True)
class McpToolInfo:
    """One tool as the server declares it (checked: a name, an object schema)."""

    name: str
    description: str
    input_schema: Mapping[str, Any] = field(default_factory=dict)


class McpServer:
    """Server ``name`` as ``config`` declares it. Cheap to construct; :meth:`start`
    starts it (once: later calls wait for the first), :meth:`aclose` stops it."""

    def __init__(self, name: str, config: McpServerConfig, executor: CodeExecutor) -> None:
        self.name = name
        self.config = config
        self.executor = executor
        self.tools: tuple[McpToolInfo, ...] = ()
        self.channel: Channel | None = None
        self._session: ClientSession | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._started: asyncio.Task[None] | None = None
        self._reader_done = False
        self._noise: list[str] = []

    async def start(self) -> None:
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        try:
            await asyncio.shield(self._started)
        except asyncio.CancelledError:
            if self._started.done():
                raise
            await self.aclose()
            raise

    async def _start(self) -> None:
        try:
            async with asyncio.timeout(self.config.startup_timeout):
                await self._open()
        except TimeoutError:
            await self.aclose()
            raise McpError(
                f"MCP server {self.name!r} did not start within "
                f"{self.config.startup_timeout:g} s{self._why()}"
            ) from None
        except McpError:
            await self.aclose()
            raise
        except (MountRefused, SandboxUnavailable) as exc:  # the sandbox's; its own fix
            await self.aclose()
            raise type(exc)(f"MCP server {self.name!r}: {exc}") from exc
        except Exception as exc:
            await self.aclose()
            # A server that exited answers nothing: the session's "connection closed"
            # says less than its stderr does.
            said = ("it exited" if self._reader_done else _say(exc)) + self._why()
            raise McpError(
                f"MCP server {self.name!r} failed to start: {said}{self._where(said)}"
            ) from exc

    async def _open(self) -> None:
        from mcp import ClientSession

        from ..executors import ExecRequest

        request = ExecRequest(
            argv=tuple(self.config.command),
            timeout=_LIFETIME_S,
            env=dict(self.config.env),
            mounts=self.config.mounts,
        )
        self._stack = contextlib.AsyncExitStack()
        self.channel = await self.executor.open(request)
        self._stack.push_async_callback(self._stop_channel)
        read, write = await self._stack.enter_async_context(_transport(self.channel, self))
        session = ClientSession(read, write)
        self._session = await self._stack.enter_async_context(session)
        await session.initialize()
        self.tools = await self._list_tools(session)

    async def _list_tools(self, session: ClientSession) -> tuple[McpToolInfo, ...]:
        tools: list[McpToolInfo] = []
        seen: set[str] = set()
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await session.list_tools(params=_page(cursor))
            for tool in page.tools:
                if not TOOL_NAME.fullmatch(tool.name) or tool.name in seen:
                    log.warning(
                        "MCP server %s: tool %r skipped (bad or repeated name)",
                        self.name,
                        tool.name[:80],
                    )
                    continue
                seen.add(tool.name)
                schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
                if schema.get("type") != "object":
                    schema = {"type": "object", "properties": {}}
                description = (tool.description or "").strip()[:MAX_DESCRIPTION]
                tools.append(McpToolInfo(tool.name, description, schema))
            cursor = page.next_cursor
            if not cursor or len(tools) >= MAX_TOOLS:
                break
        return tuple(tools[:MAX_TOOLS])

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        """Run ``tool``; its text and whether the server calls it an error. McpError
        when the server is gone, or takes longer than its ``timeout`` (it is stopped
        then: a server that hung once is not trusted with the next call)."""
        await self.start()
        session = self._session
        if session is None or self._reader_done:
            raise McpError(f"MCP server {self.name!r} is not running{self._why()}")
        from mcp import MCPError

        call = asyncio.ensure_future(session.call_tool(tool, dict(arguments)))
        try:
            # The call also ends when the server does: a dead server answers nothing.
            async with asyncio.timeout(self.config.timeout):
                result = await call
        except TimeoutError:
            await self.aclose()
            raise McpError(
                f"MCP server {self.name!r} did not answer {tool} within "
                f"{self.config.timeout:g} s; the server was stopped"
            ) from None
        except MCPError as exc:
            if self._reader_done:
                raise McpError(
                    f"MCP server {self.name!r} exited during the call{self._why()}"
                ) from exc
            raise McpError(f"MCP server {self.name!r} refused {tool}: {exc.error.message}") from exc
        except Exception as exc:
            raise McpError(f"MCP server {self.name!r} failed {tool}: {_say(exc)}") from exc
        return _text(result), bool(getattr(result, "is_error", False))

    async def aclose(self) -> None:
        stack, self._stack = self._stack, None
        self._session = None
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()

    async def _stop_channel(self) -> None:
        from ..executors._base import keep_noise

        channel = self.channel
        if channel is not None:
            result = await channel.stop("closed")
            for line in result.stderr.strip().splitlines()[-5:]:
                keep_noise(self._noise, line.encode())

    def _on_reader_end(self) -> None:
        self._reader_done = True

    def _where(self, said: str) -> str:
        """Where a sandboxed server's program must be, when the failure says it is
        missing ("" otherwise: the server failed for reasons of its own)."""
        if not self.executor.isolated or not _MISSING.search(said):
            return ""
        system = "the host's /usr" if self.executor.name == "bwrap" else "the sandbox image"
        where = (
            f". It runs in the sandbox ({self.executor.name}), where its command must "
            f"exist: in {system}, or in a directory given in mcp.servers.{self.name}.mounts "
            "(within sandbox.allowed_roots)"
        )
        program = self.config.command[0] if self.config.command else ""
        if "/" in program and _HOST_PYTHON.fullmatch(program.rsplit("/", 1)[1]):
            # A venv's python is a link to the host's interpreter, with the venv's
            # packages found from its path: in the sandbox it is the image's python3.
            where += (
                f". Its python ({program}) runs there as the sandbox's python3, without "
                "that environment's packages: install the server's packages into a "
                f"directory (pip install --target DIR ...), give DIR in "
                f"mcp.servers.{self.name}.mounts and PYTHONPATH=DIR in "
                f"mcp.servers.{self.name}.env, and run it with python3"
            )
        return where

    def _why(self) -> str:
        """The tail of what the server wrote on stderr, when it said anything."""
        tail = [line for line in self._noise if line.strip()][-3:]
        return (": " + " | ".join(line[:300] for line in tail)) if tail else ""


@contextlib.asynccontextmanager
async def _transport(channel: Channel, server: McpServer) -> Any:
    """The (read, write) streams ``ClientSession`` wants, over ``channel``: one JSON-RPC
    message per line, each line at most MAX_LINE_BYTES. When the server's output ends
    the read stream closes, which fails its pending requests at once."""
    import anyio
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    from ..executors._base import keep_noise

    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        async with read_writer:
            while True:
                line = await channel.readline(MAX_LINE_BYTES + 1)
                if not line:
                    break
                if len(line) > MAX_LINE_BYTES:
                    log.warning(
                        "MCP server %s sent a line over %d bytes", server.name, MAX_LINE_BYTES
                    )
                    break  # no way to resynchronise: the connection ends
                text = line.decode("utf-8", "replace").strip()
                if not text:
                    continue
                try:
                    message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
                except ValueError:
                    keep_noise(server._noise, line)  # a log line on stdout: its bounded tail
                    continue
                await read_writer.send(SessionMessage(message))
        server._on_reader_end()

    async def writer() -> None:
        async with write_reader:
            async for item in write_reader:
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    await channel.write(data.encode() + b"\n")
                except Exception:
                    break

    tasks = [asyncio.ensure_future(reader()), asyncio.ensure_future(writer())]
    try:
        yield read_stream, write_stream
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for stream in (read_stream, write_stream):
            await stream.aclose()


def _page(cursor: str | None) -> Any:
    if cursor is None:
        return None
    import mcp_types as types

    return types.PaginatedRequestParams(cursor=cursor)


def _text(result: Any) -> str:
    """A tool result as the text a model reads: text blocks joined, other blocks named,
    structured content as JSON when there is no text."""
    import json

    parts: list[str] = []
    for block in getattr(result, "content", None) or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(block.text))
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    return "\n".join(parts)


def _say(exc: BaseException) -> str:
    """One line about ``exc``: our own errors say it all, others are named by type."""
    text = str(exc).strip().splitlines()
    if text and isinstance(exc, JarvisError):
        return text[0][:300]
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
