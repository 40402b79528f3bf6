"""The ACP wire of ``jarvis acp``: newline-delimited JSON-RPC on stdio, bounded.

The SDK's own NDJSON transport reads a line of any length, drops unparsable lines
without a word and hands any JSON value on (a bare ``1`` or a list id breaks its
receive loop). Everything a client sends is untrusted, so this transport is the edge:
a line is at most :data:`MAX_LINE_BYTES`, and a line that is too long, not JSON, or
not a JSON-RPC 2.0 message gets an error reply (``id`` null when none can be read)
and never reaches the connection. What passes is a well-formed request, notification
or response; the SDK's router answers unknown methods and bad params itself.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ._jsonrpc import INVALID_REQUEST, PARSE_ERROR, check_message

__all__ = ["MAX_LINE_BYTES", "BoundedNdjson", "check_message"]

#: The longest line (one JSON-RPC message) read from a client: room for a prompt
#: with an image, not for a client that never sends a newline.
MAX_LINE_BYTES = 8 * 1024 * 1024


class _TooLong:
    """The marker of a line that was longer than the limit (dropped, not kept)."""


_TOO_LONG = _TooLong()


class BoundedNdjson:
    """An ``acp`` message transport (``send``, ``receive``, ``close``) over a stream
    reader and writer, with the checks above."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_line: int = MAX_LINE_BYTES,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._max_line = max_line
        self._lock = asyncio.Lock()
        self._closed = False
        #: Bad messages answered (for tests and logs).
        self.rejected = 0
        self._pushed: list[dict[str, Any]] = []

    def push_back(self, message: dict[str, Any]) -> None:
        """Have the next ``receive`` return ``message`` (one read ahead, not taken)."""
        self._pushed.append(message)

    async def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
        async with self._lock:
            if self._closed:
                raise ConnectionError("the client's stream is closed")
            self._writer.write(data + b"\n")
            await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        if self._pushed:
            return self._pushed.pop(0)
        while True:
            line = await self._read_line()
            if line is None:
                return None
            if line is _TOO_LONG:
                await self._reject(
                    None, INVALID_REQUEST, f"a message is at most {self._max_line} bytes"
                )
                continue
            assert isinstance(line, bytes)
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):  # RecursionError: absurd nesting
                await self._reject(None, PARSE_ERROR, "parse error: not JSON")
                continue
            problem = check_message(message)
            if problem is not None:
                await self._reject(problem[1], INVALID_REQUEST, problem[0])
                continue
            assert isinstance(message, dict)  # check_message saw to it
            return message

    async def close(self) -> None:
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._writer.close()
            except (OSError, RuntimeError):
                pass

    async def _reject(self, reply_id: object, code: int, message: str) -> None:
        self.rejected += 1
        error = {"code": code, "message": message}
        try:
            await self.send({"jsonrpc": "2.0", "id": reply_id, "error": error})
        except (ConnectionError, OSError):
            pass  # the client is gone: the next read ends the loop

    async def _read_line(self) -> bytes | _TooLong | None:
        """One line (with its newline), the marker of a dropped too-long line, or
        None at the end of the stream. The reader's own limit is this one's, so it
        never buffers more than that."""
        too_long = False
        while True:
            try:
                line = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:  # the end, perhaps mid-line
                if too_long:
                    return _TOO_LONG
                return exc.partial or None
            except asyncio.LimitOverrunError as exc:
                # Drop what is buffered and go on dropping until the line ends.
                too_long = True
                try:
                    await self._reader.readexactly(max(exc.consumed, 1))
                except asyncio.IncompleteReadError:
                    return _TOO_LONG
                continue
            if too_long or len(line) > self._max_line + 1:
                return _TOO_LONG
            return line
