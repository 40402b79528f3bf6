"""Serving the ACP agent on a pair of streams (stdio for ``jarvis acp``)."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import TYPE_CHECKING

from ._wire import MAX_LINE_BYTES, BoundedNdjson

if TYPE_CHECKING:
    from .._config import Config
    from ..runs import AgentSpec
    from ._store import SessionStore

__all__ = ["serve", "serve_stdio"]


async def serve(
    spec: AgentSpec,
    config: Config,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    store: SessionStore | None = None,
    max_line: int = MAX_LINE_BYTES,
) -> None:
    """Answer one client on ``reader``/``writer`` until it closes its end."""
    from acp import run_agent

    from ._agent import JarvisAcpAgent
    from ._store import SessionStore

    agent = JarvisAcpAgent(spec, config, store or SessionStore())
    transport = BoundedNdjson(reader, writer, max_line=max_line)
    try:
        await run_agent(agent, transport)  # type: ignore[arg-type]  # a Transport is taken
    finally:
        await agent.aclose()


async def _stdio() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The client's streams. The protocol gets its own copy of stdout, and fd 1
    becomes stderr: anything else that prints (a library, llama.cpp's C code) cannot
    put a stray line on the wire."""
    loop = asyncio.get_running_loop()
    wire = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, wire)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return reader, writer


def serve_stdio(spec: AgentSpec, config: Config) -> None:
    async def main() -> None:
        reader, writer = await _stdio()
        await serve(spec, config, reader, writer)

    asyncio.run(main())
