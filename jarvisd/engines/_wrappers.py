"""Thin wrappers around the engine seam: instrumentation, and the per-run guard that
enforces one budget and one cancellation token across every nested agent."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Coroutine, Sequence
from dataclasses import replace
from typing import TypeVar

from .._errors import EngineUnavailable
from .._events import EventBus, EventType
from .._messages import Generation, Message, SamplingOptions, StreamChunk, ToolSpec, Usage
from .._runcontext import BudgetExceeded, Hold, RunContext
from ._base import DEFAULT_OPTIONS, Engine, ModelInfo
from ._tokens import prompt_tokens, text_tokens

__all__ = ["InstrumentedEngine", "RunEngine", "WrapperEngine"]

_T = TypeVar("_T")
#: What one call asked for: messages, tools, model.
_Request = tuple[Sequence[Message], Sequence[ToolSpec], str]
#: The running task of each loop, read as asyncio.current_task() reads it: on 3.11 that
#: function is Python (C from 3.12 on, and then called as it is).
_CURRENT_TASKS: dict[asyncio.AbstractEventLoop, asyncio.Task[object]] | None = (
    getattr(asyncio.tasks, "_current_tasks", None) if sys.version_info < (3, 12) else None
)


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

    def count_tokens(self, text: str, model: str = "") -> int | None:
        return self.inner.count_tokens(text, model)

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


def _failed(
    bus: EventBus,
    engine: str,
    model: str,
    start: float,
    exc: BaseException,
    charged: Usage | None = None,
) -> None:
    # ``charged``: what the run's ledger charged for the failed call, so that traces,
    # which add up these events, agree with it.
    usage = {} if charged is None else charged.to_dict()
    usage.pop("total_tokens", None)
    bus.publish(
        EventType.INFERENCE_END,
        engine=engine,
        model=model,
        latency_s=time.perf_counter() - start,
        error=f"{type(exc).__name__}: {exc}",
        **usage,
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
    """Binds an engine to one run: the one place where engine calls reserve and settle
    the run's ledger. Every call first holds its worst case (prompt tokens, counted or
    bounded, plus the completion it may produce, its ``max_tokens`` clamped to what is
    left), races the run's cancel token while in flight, and settles to what it really
    used: the engine's usage, or, for a call that failed or was cancelled, its prompt
    and the tokens it streamed so far. A call the ledger refuses stops the whole run
    (BudgetExceeded through the token). Inference events go to the run's bus.

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

    def _reserve(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        model: str,
        options: SamplingOptions,
    ) -> tuple[Hold, SamplingOptions]:
        run = self.run
        if run.cancel.cancelled:
            raise run.cancel.error()
        budget = run.budget
        # Without a token cap nothing needs the prompt's size before the call: a turn
        # of an unbudgeted run does not pay for counting it.
        prompt = (
            0 if budget.max_tokens is None else prompt_tokens(self.inner, messages, tools, model)
        )
        try:
            hold = budget.reserve(prompt, options.max_tokens)
        except BudgetExceeded as exc:
            # A hard stop: every other branch of the run (parallel members, calls in
            # flight, containers) stops too, with the same reason.
            run.cancel.cancel(str(exc), stop=BudgetExceeded)
            raise
        if hold.completion_tokens != options.max_tokens:
            options = replace(options, max_tokens=hold.completion_tokens)
        return hold, options

    def _prompt(self, hold: Hold, request: _Request) -> int:
        # Counted before the call only under a token cap; counted here otherwise.
        return hold.prompt_tokens or prompt_tokens(self.inner, *request)

    def _settle(self, hold: Hold, generation: Generation, request: _Request) -> None:
        usage = generation.usage
        if not usage.total_tokens:
            # An engine that reports no usage is charged its prompt as counted and the
            # reply's own count (never more than the call could produce).
            text = generation.content + "".join(c.name + c.arguments for c in generation.tool_calls)
            completion = min(text_tokens(self.inner, text, request[2]), hold.completion_tokens)
            usage = Usage(self._prompt(hold, request), completion)
        hold.settle(usage)

    def _interrupted(
        self, hold: Hold, exc: BaseException | None, streamed: str, request: _Request
    ) -> Usage | None:
        """End the hold of a call that did not finish: given back when the engine was
        never reached, else charged its prompt and the text streamed so far (what is
        charged is returned)."""
        if not hold.open:
            return None
        if isinstance(exc, EngineUnavailable) and not streamed:
            hold.release()
            return None
        completion = min(text_tokens(self.inner, streamed, request[2]), hold.completion_tokens)
        usage = Usage(self._prompt(hold, request), completion)
        hold.settle(usage)
        return usage

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

    def _enter(
        self, work: Awaitable[object], unstarted: Hold | None
    ) -> asyncio.Task[object] | None:
        """List the caller's task in ``_waiting`` while ``work`` runs (the token's one
        callback cancels what is listed there), or raise the run's stop when it has
        stopped: ``work`` is then closed, and ``unstarted``, the hold of a call that
        ``work`` would start, given back. Awaited in the caller's own task (no helper
        task per call). The caller ends with :meth:`_leave`, whatever happens."""
        task = (
            asyncio.current_task()
            if _CURRENT_TASKS is None
            else _CURRENT_TASKS.get(asyncio.get_running_loop())
        )
        if task is None:  # pragma: no cover - always inside a task under asyncio.run
            return None
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self.run.cancel.on_cancel(self._wake)
        self._waiting.add(task)
        # Checked after joining ``_waiting``: a cancel from another thread either sees
        # this task there or is seen here.
        cancel = self.run.cancel
        if cancel.cancelled:
            self._waiting.discard(task)
            if isinstance(work, Coroutine):
                work.close()
            if unstarted is not None:
                unstarted.release()
            raise cancel.error()
        return task

    def _leave(self, task: asyncio.Task[object] | None, exc: BaseException | None) -> None:
        """Unlist ``task``; when ``exc`` is the cancellation the token fired, raise the
        run's stop instead (and take the cancellation back from the task)."""
        if task is None:  # pragma: no cover - see _enter
            return
        self._waiting.discard(task)
        if task in self._fired:
            self._fired.discard(task)
            if isinstance(exc, asyncio.CancelledError):
                task.uncancel()
                raise self.run.cancel.error() from None

    async def _race(self, work: Awaitable[_T], unstarted: Hold | None = None) -> _T:
        """``work``, awaited between :meth:`_enter` and :meth:`_leave`."""
        task = self._enter(work, unstarted)
        try:
            result = await work
        except BaseException as exc:
            self._leave(task, exc)
            raise
        self._leave(task, None)
        return result

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        model = model or self.inner.default_model()
        run = self.run
        budget = run.budget
        if (
            budget.max_tokens is None
            and budget.max_calls is None
            and budget.max_wall is None
            and not run.cancel.cancelled
            and options.max_tokens >= 0
        ):
            # _reserve's usual case, written out: an uncapped ledger neither refuses nor
            # clamps the call (so the options stay as they are); every turn comes here.
            hold = budget.reserve(0, options.max_tokens)
        else:
            hold, options = self._reserve(messages, tools, model, options)
        bus, name = run.bus, self.name
        # _started and _ended, written out: this runs every turn of every run.
        bus.publish(EventType.INFERENCE_START, engine=name, model=model, messages=len(messages))
        start = time.perf_counter()
        try:
            # _race, written out (one coroutine less a turn).
            work = self.inner.generate(messages, model=model, tools=tools, options=options)
            # _enter(work, hold), its usual case written out: this task joins _waiting,
            # then the run's stop is checked (the order _enter keeps, see there).
            task = (
                asyncio.current_task()
                if _CURRENT_TASKS is None
                else _CURRENT_TASKS.get(asyncio.get_running_loop())
            )
            if task is not None and self._loop is not None:
                self._waiting.add(task)
                if run.cancel.cancelled:  # stopped: _enter closes work, gives back, raises
                    task = self._enter(work, hold)
            else:  # the first call (it registers with the token), or no task
                task = self._enter(work, hold)
            try:
                generation = await work
            except BaseException as exc:
                self._leave(task, exc)
                raise
            # _leave(task, None), written out: nothing to raise after a call that ended.
            self._waiting.discard(task)
            self._fired.discard(task)
        except BaseException as exc:
            charged = self._interrupted(hold, exc, "", (messages, tools, model))
            _failed(bus, name, model, start, exc, charged)
            raise
        usage = generation.usage
        if usage.prompt_tokens or usage.completion_tokens:  # the engine counted: charge it
            budget._end(hold, usage)  # hold.settle(usage), without its frame
        else:
            self._settle(hold, generation, (messages, tools, model))
            usage = generation.usage
        latency = time.perf_counter() - start
        bus.publish(
            EventType.INFERENCE_END,
            engine=name,
            model=generation.model or model,
            latency_s=latency,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            tool_calls=len(generation.tool_calls),
        )
        return generation if generation.latency_s else replace(generation, latency_s=latency)

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        model = model or self.inner.default_model()
        hold, options = self._reserve(messages, tools, model, options)
        iterator = aiter(
            InstrumentedEngine(self.inner, self.run.bus).stream(
                messages, model=model, tools=tools, options=options
            )
        )
        streamed: list[str] = []
        error: BaseException | None = None
        unstarted: Hold | None = hold
        try:
            while True:
                try:
                    chunk = await self._race(anext(iterator), unstarted)
                except StopAsyncIteration:
                    return
                unstarted = None
                if chunk.delta:
                    streamed.append(chunk.delta)
                if chunk.done and chunk.generation is not None:
                    self._settle(hold, chunk.generation, (messages, tools, model))
                yield chunk
        except BaseException as exc:
            error = exc
            raise
        finally:
            # A failed or cancelled stream, or a consumer that stopped reading
            # (GeneratorExit), is charged what it consumed until then.
            self._interrupted(hold, error, "".join(streamed), (messages, tools, model))
            closer = getattr(iterator, "aclose", None)
            if closer is not None:
                await closer()
