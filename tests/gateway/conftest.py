"""Helpers for gateway tests: run a gateway over an engine for the length of a test."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from jarvisd import Message, SamplingOptions, ToolSpec
from jarvisd._messages import Generation, StreamChunk
from jarvisd._runcontext import RunContext
from jarvisd.engines import Engine
from jarvisd.gateway import Gateway

T = TypeVar("T")

CALC = {
    "type": "object",
    "properties": {"expression": {"type": "string"}},
    "required": ["expression"],
}


def serve(
    engine: Engine,
    body: Callable[[Gateway], Awaitable[T]],
    run: RunContext | None = None,
    **kw: Any,
) -> T:
    """Run ``body(gateway)`` with a gateway over ``engine`` on a fresh loop."""

    async def go() -> T:
        async with Gateway(engine, run or RunContext(), **kw) as gw:
            return await body(gw)

    return asyncio.run(go())


class StallingEngine(Engine):
    """Streams ``first``, then waits until cancelled: a generation still in flight."""

    name = "stalling"

    def __init__(self, first: str = "hello ") -> None:
        self.first = first
        self.started = asyncio.Event()
        self.closed = False

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = SamplingOptions(),  # noqa: B008
    ) -> Generation:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = SamplingOptions(),  # noqa: B008
    ) -> AsyncIterator[StreamChunk]:
        try:
            yield StreamChunk(delta=self.first)
            self.started.set()
            await asyncio.Event().wait()
        finally:
            self.closed = True


class BackgroundGateway:
    """A gateway on its own loop thread, for synchronous clients (hypothesis tests)."""

    def __init__(self, engine: Engine, **kw: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.gateway = Gateway(engine, RunContext(), **kw)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> Gateway:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.gateway.__aenter__(), self.loop).result(30)
        return self.gateway

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.gateway.aclose(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()
