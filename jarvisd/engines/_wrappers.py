"""Thin wrappers around the engine seam: instrumentation, and the per-run guard that
enforces one budget and one cancellation token across every nested agent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Coroutine, Sequence
from dataclasses import replace
from typing import TypeVar

from .._events import EventBus, EventType
from .._messages import Generation, Message, SamplingOptions, StreamChunk, ToolSpec
from .._run import Cancelled, RunContext
from ._base import DEFAULT_OPTIONS, Engine, ModelInfo

__all__ = ["InstrumentedEngine", "RunEngine", "WrapperEngine"]

_T = TypeVar("_T")


class WrapperEngine(Engine):
    """Delegates everything to ``inner``; subclasses override what they change."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        return await self.inner.generate(messages, model=model, tools=tools, options=options)

    def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        return self.inner.stream(messages, model=model, tools=tools, options=options)

    async def health(self) -> bool:
        return await self.inner.health()

    async def list_models(self) -> list[ModelInfo]:
        return await self.inner.list_models()

    async def context_length(self, model: str = "") -> int | None:
        return await self.inner.context_length(model)

    def default_model(self) -> str:
        return self.inner.default_model()

    async def aclose(self) -> None:
        await self.inner.aclose()


def _started(bus: EventBus, engine: str, model: str, messages: int) -> float:
    bus.publish(EventType.INFERENCE_START, engine=engine, model=model, messages=messages)
    return time.perf_counter()


def _ended(bus: EventBus, engine: str, model: str, start: float, generation: Generation) -> float:
    latency = time.perf_counter() - start
    bus.publish(
        EventType.INFERENCE_END,
        engine=engine,
        model=generation.model or model,
        latency_s=latency,
        prompt_tokens=generation.usage.prompt_tokens,
        completion_tokens=generation.usage.completion_tokens,
        tool_calls=len(generation.tool_calls),
    )
    return latency


def _failed(bus: EventBus, engine: str, model: str, start: float, exc: BaseException) -> None:
    bus.publish(
        EventType.INFERENCE_END,
        engine=engine,
        model=model,
        latency_s=time.perf_counter() - start,
        error=f"{type(exc).__name__}: {exc}",
    )


def _timed(generation: Generation, latency: float) -> Generation:
    return generation if generation.latency_s else replace(generation, latency_s=latency)


class InstrumentedEngine(WrapperEngine):
    """Publishes INFERENCE_START / INFERENCE_END (tokens, latency, error) on a bus."""

    def __init__(self, inner: Engine, bus: EventBus) -> None:
        super().__init__(inner)
        self.bus = bus

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        model = model or self.inner.default_model()
        start = _started(self.bus, self.name, model, len(messages))
        try:
            generation = await self.inner.generate(
                messages, model=model, tools=tools, options=options
            )
        except BaseException as exc:
            _failed(self.bus, self.name, model, start, exc)
            raise
        return _timed(generation, _ended(self.bus, self.name, model, start, generation))

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        model = model or self.inner.default_model()
        start = _started(self.bus, self.name, model, len(messages))
        ended = False
        try:
            async for chunk in self.inner.stream(
                messages, model=model, tools=tools, options=options
            ):
                if chunk.done and chunk.generation is not None:
                    ended = True
                    latency = _ended(self.bus, self.name, model, start, chunk.generation)
                    chunk = replace(chunk, generation=_timed(chunk.generation, latency))
                yield chunk
        except BaseException as exc:
            # A failing engine, a cancelled run or a consumer that stopped reading
            # (GeneratorExit): every start gets its end.
            if not ended:
                _failed(self.bus, self.name, model, start, exc)
            raise


class RunEngine(WrapperEngine):
    """Binds an engine to one run: every call first reserves budget (so the run cannot
    overshoot its token cap by a whole call), races the run's cancel token, and charges
    the tokens it really used. Inference events go to the run's bus.

    Use :meth:`bind`: one wrapper per run and engine, registered once with the token."""

    def __init__(self, inner: Engine, run: RunContext) -> None:
        super().__init__(inner)
        self.run = run
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: set[asyncio.Task[object]] = set()  # tasks inside an engine call
        self._fired: set[asyncio.Task[object]] = set()  # of those, the ones we cancelled

    @classmethod
    def bind(cls, engine: Engine, run: RunContext) -> RunEngine:
        """The run's wrapper around ``engine``, built on first use and then reused (a
        turn costs microseconds; the wrapper should not cost more)."""
        bound: RunEngine | None = run.bound_engines.get(id(engine))
        # The cached wrapper holds the engine, so its id cannot be reused while cached.
        if bound is not None and bound.inner is engine:
            return bound
        if isinstance(engine, RunEngine) and engine.run.cancel is run.cancel:
            return engine
        bound = run.bound_engines[id(engine)] = cls(engine, run)
        return bound

    def _limit(self, options: SamplingOptions) -> SamplingOptions:
        self.run.cancel.raise_if_cancelled()
        allowed = self.run.budget.reserve(options.max_tokens)
        return options if allowed == options.max_tokens else replace(options, max_tokens=allowed)

    def _wake(self) -> None:
        # Called by the token, perhaps from another thread, perhaps long after the
        # run's loop has closed (then there is nothing left to interrupt).
        if self._loop is None or not self._waiting:
            return
        try:
            self._loop.call_soon_threadsafe(self._fire)
        except RuntimeError:
            pass

    def _fire(self) -> None:
        for task in tuple(self._waiting):
            self._fired.add(task)
            task.cancel()

    async def _race(self, work: Awaitable[_T]) -> _T:
        # Awaited in the caller's own task (no helper task per call); while ``work``
        # runs, the task is listed in ``_waiting`` and the token's one callback
        # cancels it.
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - always inside a task under asyncio.run
            return await work
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self.run.cancel.on_cancel(self._wake)
        self._waiting.add(task)
        try:
            # Checked after joining ``_waiting``: a cancel from another thread either
            # sees this task there or is seen here.
            if self.run.cancel.cancelled:
                if isinstance(work, Coroutine):
                    work.close()
                raise Cancelled(self.run.cancel.reason)
            return await work
        except asyncio.CancelledError:
            if task in self._fired:
                task.uncancel()
                raise Cancelled(self.run.cancel.reason) from None
            raise
        finally:
            self._waiting.discard(task)
            self._fired.discard(task)

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        options = self._limit(options)
        model = model or self.inner.default_model()
        bus = self.run.bus
        start = _started(bus, self.name, model, len(messages))
        try:
            generation = await self._race(
                self.inner.generate(messages, model=model, tools=tools, options=options)
            )
        except BaseException as exc:
            _failed(bus, self.name, model, start, exc)
            raise
        self.run.budget.charge(generation.usage)
        return _timed(generation, _ended(bus, self.name, model, start, generation))

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        options = self._limit(options)
        model = model or self.inner.default_model()
        iterator = aiter(
            InstrumentedEngine(self.inner, self.run.bus).stream(
                messages, model=model, tools=tools, options=options
            )
        )
        try:
            while True:
                try:
                    chunk = await self._race(anext(iterator))
                except StopAsyncIteration:
                    return
                if chunk.done and chunk.generation is not None:
                    self.run.budget.charge(chunk.generation.usage)
                yield chunk
        finally:
            closer = getattr(iterator, "aclose", None)
            if closer is not None:
                await closer()
