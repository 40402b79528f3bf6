"""JSON-RPC messages over a started program's stdio, for the ACP connection.

The ACP SDK's own stdio transport reads lines of any length into memory and skips lines
that are not JSON; an external agent is hostile, so this one bounds every line in bytes
and ends the conversation at the first malformed message, saying what was wrong
(:attr:`ChannelTransport.error`). The connection then fails every pending request, so
a bad agent gives a clear failure and never a hang.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, NoReturn

from .._errors import ProtocolError
from ..executors import Channel

__all__ = ["MAX_LINE_BYTES", "ChannelTransport", "check_message"]

#: The longest JSON-RPC line an agent may send (a whole file read back is the largest
#: legitimate message: a written file's content travels in one line).
MAX_LINE_BYTES = 8 * 1024 * 1024


def check_message(message: object) -> dict[str, Any]:
    """``message`` if it has the shape of a JSON-RPC 2.0 message, else ProtocolError."""
    if not isinstance(message, dict):
        raise ProtocolError(f"a JSON-RPC message must be an object, not {type(message).__name__}")
    if message.get("jsonrpc") != "2.0":
        raise ProtocolError('a JSON-RPC message must carry "jsonrpc": "2.0"')
    if "id" in message:
        ident = message["id"]
        if ident is not None and (isinstance(ident, bool) or not isinstance(ident, int | str)):
            raise ProtocolError("a JSON-RPC id must be a number, a string or null")
    if "method" in message:
        if not isinstance(message["method"], str):
            raise ProtocolError("a JSON-RPC method must be a string")
        params = message.get("params")
        if params is not None and not isinstance(params, dict | list):
            raise ProtocolError("JSON-RPC params must be an object or a list")
    elif "id" not in message or ("result" not in message and "error" not in message):
        raise ProtocolError("a JSON-RPC message must be a request, a notification or a reply")
    elif "error" in message and not isinstance(message["error"], dict):
        raise ProtocolError("a JSON-RPC error must be an object")
    return message


class ChannelTransport:
    """The ``acp`` Transport seam (send, receive, close) over a :class:`Channel`."""

    def __init__(self, channel: Channel, *, max_line: int = MAX_LINE_BYTES) -> None:
        self.channel = channel
        self.max_line = max_line
        #: Why the conversation ended early (a malformed message), or None.
        self.error: ProtocolError | None = None
        self._send_lock = asyncio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
        async with self._send_lock:  # one whole line at a time
            await self.channel.write(data.encode("utf-8"))

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self.channel.readline(self.max_line + 1)
            if not line:
                return None
            if len(line) > self.max_line:
                self._fail(f"the agent sent a line longer than {self.max_line} bytes")
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):
                head = line[:80].decode("utf-8", "replace").strip()
                self._fail(f"the agent sent a line that is not JSON: {head!r}")
            try:
                return check_message(message)
            except ProtocolError as exc:
                self._fail(f"the agent sent a malformed JSON-RPC message: {exc}")

    def _fail(self, message: str) -> NoReturn:
        self.error = ProtocolError(message)
        raise self.error

    async def close(self) -> None:
        await self.channel.close_stdin()
