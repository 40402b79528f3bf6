"""The embedded engine's thread discipline, without a model: llama.cpp is not
thread-safe, so one generation at a time, however requests are cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from jarvisd import Message
from jarvisd.engines import LlamaCppEngine


class _OneAtATimeLlama:
    """Stands in for llama_cpp.Llama, which is not thread-safe: records how many
    threads are inside a generation at once (two at once crashes the real one)."""

    n_tokens = 0

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0
        self.started = threading.Event()

    def create_chat_completion(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.active += 1
        self.peak = max(self.peak, self.active)
        self.started.set()
        try:
            for _ in range(40):
                time.sleep(0.01)
                yield {"choices": [{"delta": {"content": "x"}, "finish_reason": None}]}
        finally:
            self.active -= 1


@pytest.mark.parametrize("cancels", [1, 2, 3])
def test_a_cancelled_generation_ends_before_the_next_one_starts(cancels: int) -> None:
    """A request cancelled again while it waits for its generation thread to stop (a
    gateway client gone and the run's cancel, at once) must not let the next request
    into llama.cpp while that thread is still in it."""
    engine = LlamaCppEngine("/nonexistent/model.gguf")
    fake = engine._llama = _OneAtATimeLlama()

    async def go() -> None:
        async def consume() -> None:
            async for _ in engine.stream([Message.user("x")]):
                pass

        first = asyncio.create_task(consume())
        await asyncio.to_thread(fake.started.wait)
        for _ in range(cancels):
            first.cancel()
            await asyncio.sleep(0)
        second = asyncio.create_task(consume())
        with contextlib.suppress(asyncio.CancelledError):
            await first
        await second

    asyncio.run(go())
    assert fake.peak == 1


def test_aclose_waits_for_a_generation_still_running_in_its_thread() -> None:
    """Closing the engine while a cancelled request's thread still decodes must stop
    that thread first: freeing the model under it crashes the process."""
    engine = LlamaCppEngine("/nonexistent/model.gguf")
    fake = engine._llama = _OneAtATimeLlama()
    freed_while_active: list[int] = []
    fake.close = lambda: freed_while_active.append(fake.active)  # type: ignore[attr-defined]

    async def go() -> None:
        async def consume() -> None:
            async for _ in engine.stream([Message.user("x")]):
                pass

        task = asyncio.create_task(consume())
        await asyncio.to_thread(fake.started.wait)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()  # no longer waits for its thread
        await engine.aclose()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert freed_while_active == [0]


def test_tokens_are_not_counted_beside_a_running_generation() -> None:
    """Counting calls into llama.cpp too: beside a decode in another thread it gives
    way (None: the ledger's byte bound) instead of racing it."""
    engine = LlamaCppEngine("/nonexistent/model.gguf")
    fake = engine._llama = _OneAtATimeLlama()
    fake.tokenize = lambda data, **kw: list(data)  # type: ignore[attr-defined]
    assert engine.count_tokens("four") == 4

    async def go() -> int | None:
        async def consume() -> None:
            async for _ in engine.stream([Message.user("x")]):
                pass

        task = asyncio.create_task(consume())
        await asyncio.to_thread(fake.started.wait)
        counted = engine.count_tokens("four")
        await task
        return counted

    assert asyncio.run(go()) is None
