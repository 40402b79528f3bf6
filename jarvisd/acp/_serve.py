"""Serving the ACP agent on a pair of streams (stdio for ``jarvis acp``).

Only the standard library and the wire are imported here: ``jarvis acp`` answers
``initialize`` (``jarvisd.acp._hello``) first, and only then loads the run's spec, the
config and the ACP SDK (in a worker thread: the loop goes on reading).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._wire import MAX_LINE_BYTES, BoundedNdjson

if TYPE_CHECKING:
    from .._config import Config
    from ..runs import AgentSpec
    from ._store import SessionStore

__all__ = ["Prepare", "serve", "serve_fds"]

Prepare = Callable[[], "tuple[AgentSpec, Config]"]


async def serve(
    spec: AgentSpec | Prepare,
    config: Config | None,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    store: SessionStore | None = None,
    max_line: int = MAX_LINE_BYTES,
    hello: tuple[bool, bool] | None = None,
) -> None:
    """Answer one client on ``reader``/``writer`` until it closes its end. ``spec``
    may be a function making the spec and the config (``config`` None): it runs in a
    worker thread once ``initialize`` is answered, and what it raises is raised here."""
    transport = BoundedNdjson(reader, writer, max_line=max_line)
    # The client's first message (initialize) is answered before the imports start:
    # a thread importing would take half of the interpreter from the answer.
    # ``hello``: initialize was answered already (``jarvisd.acp._stdio``), with this offer.
    reads_files, writes_files = hello if hello is not None else await _hello(transport)
    if callable(spec):
        spec, config = await asyncio.get_running_loop().run_in_executor(None, _prepare, spec)
    assert config is not None and not callable(spec)
    from acp import run_agent

    from ._agent import JarvisAcpAgent
    from ._store import SessionStore

    agent = JarvisAcpAgent(spec, config, store or SessionStore())
    agent.client_reads_files, agent.client_writes_files = reads_files, writes_files
    try:
        await run_agent(agent, transport)  # type: ignore[arg-type]  # a Transport is taken
    finally:
        await agent.aclose()


def _prepare(make: Prepare) -> tuple[AgentSpec, Config]:
    made = make()
    import acp  # noqa: F401  (the SDK's models, loaded here rather than on the loop)

    return made


async def _hello(transport: BoundedNdjson) -> tuple[bool, bool]:
    """Answer the client's first message if it is a plain ``initialize`` (anything
    else is left for the SDK); whether the client reads and writes its files for us."""
    from ._hello import client_fs, initialize_reply

    first = await transport.receive()
    if first is None:
        return False, False
    reply = initialize_reply(first.get("params")) if first.get("method") == "initialize" else None
    if reply is None or "id" not in first:
        transport.push_back(first)
        return False, False
    await transport.send({"jsonrpc": "2.0", "id": first["id"], "result": reply})
    return client_fs(first.get("params"))


async def _stdio(wire: int, unread: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The client's streams: stdin (after ``unread``, what was read of it already) and
    ``wire`` (the protocol's copy of stdout). Pipes, sockets and terminals are read and
    written without blocking; a regular file (``jarvis acp < requests > replies``)
    through a thread and plain writes."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    if unread:
        reader.feed_data(unread)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except ValueError:  # a regular file
        threading.Thread(target=_feed, args=(loop, reader), daemon=True).start()
    stream = os.fdopen(wire, "wb", buffering=0)
    try:
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, stream
        )
    except ValueError:  # a regular file
        return reader, _FileWriter(stream)  # type: ignore[return-value]
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


def _feed(loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader) -> None:
    stream = sys.stdin.buffer
    while chunk := stream.read1(65536):  # type: ignore[union-attr]
        loop.call_soon_threadsafe(reader.feed_data, chunk)
    loop.call_soon_threadsafe(reader.feed_eof)


class _FileWriter:
    """What the wire needs of a stream writer, on a regular file."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, data: bytes) -> None:
        self._stream.write(data)

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self._stream.close()


def serve_fds(prepare: Prepare, wire: int, unread: bytes, hello: tuple[bool, bool] | None) -> None:
    """``jarvis acp``'s loop (see ``jarvisd.acp._stdio``, which starts it)."""

    async def main() -> None:
        reader, writer = await _stdio(wire, unread)
        await serve(prepare, None, reader, writer, hello=hello)

    asyncio.run(main())
