"""The ToolDispatcher: one call in, one :class:`ToolResult` out, whatever happens.

For each call: look the tool up, parse and repair the arguments, validate them against
the schema, ask the loop guard, publish TOOL_CALL_START, run (inline, in a thread, or
awaited, under a timeout), publish TOOL_CALL_END with latency. Every failure becomes
``ToolResult(success=False)`` with a message written for the model; nothing raises out
except the run's own stop signals (:class:`RunStopped`: cancelled, budget spent) and
:class:`SandboxUnavailable`, which no reply of the model can fix: the run ends with it.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .._errors import SandboxUnavailable
from .._events import EventBus, EventType
from .._messages import ToolCall, ToolResult, ToolSpec
from .._runcontext import BudgetExceeded, RunContext, RunStopped
from ._args import ArgumentChecker, ArgumentError, parse_arguments
from ._base import _CURRENT_RUN, BaseTool

__all__ = ["LoopGuard", "ToolDispatcher"]

MAX_RESULT_CHARS = 20_000
#: Raised out of a tool call instead of becoming a result for the model.
_T = TypeVar("_T")
_FATAL = (RunStopped, SandboxUnavailable)
_new = object.__new__


@dataclass(slots=True)
class LoopGuard:
    """Counts identical calls (same tool, same arguments) within one agent run and
    blocks them past ``max_repeats``. Its state is part of the loop's checkpoint."""

    max_repeats: int = 1
    counts: dict[str, int] = field(default_factory=dict)
    last: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def key(name: str, params: Mapping[str, object]) -> str:
        # repr of the sorted items: canonical for equal arguments, and cheap.
        if len(params) < 2:  # the usual case: already canonical, no sorting
            return f"{name}:{params!r}"
        return f"{name}:{sorted(params.items())!r}"

    def to_dict(self) -> dict[str, object]:
        return {
            "max_repeats": self.max_repeats,
            "counts": dict(self.counts),
            "last": dict(self.last),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoopGuard:
        return cls(
            int(data.get("max_repeats", 1)),
            {str(k): int(v) for k, v in (data.get("counts") or {}).items()},
            {str(k): str(v) for k, v in (data.get("last") or {}).items()},
        )


def _fail(call: ToolCall, message: str, start: float, **meta: object) -> ToolResult:
    return ToolResult(
        tool_name=call.name,
        content=message,
        success=False,
        call_id=call.id,
        latency_s=time.perf_counter() - start,
        metadata=meta,
    )


class ToolDispatcher:
    def __init__(
        self,
        tools: Sequence[BaseTool],
        *,
        bus: EventBus | None = None,
        timeout: float = 30.0,
        max_result_chars: int = MAX_RESULT_CHARS,
    ) -> None:
        self.tools: dict[str, BaseTool] = {}
        for tool in tools:
            name = tool.spec.name
            if name in self.tools:
                raise ValueError(f"two tools are named {name!r}")
            self.tools[name] = tool
        self._lower = {name.lower(): name for name in self.tools}
        is_async = {n: inspect.iscoroutinefunction(t.execute) for n, t in self.tools.items()}
        # Sync tools run in a worker thread under the timeout unless they are declared
        # cheap (blocking = False): those run inline.
        self._threaded = {n: t.blocking and not is_async[n] for n, t in self.tools.items()}
        self._inline = {n: not t.blocking and not is_async[n] for n, t in self.tools.items()}
        #: The tools whose calls run inline, by name (read-only): a turn of one call to
        #: one of them is :meth:`execute_all`'s whole work done by :meth:`execute` alone.
        self.inline: Mapping[str, bool] = self._inline
        self.specs: tuple[ToolSpec, ...] = tuple(t.spec for t in self.tools.values())
        #: Each tool's spec by its name, read once (``spec`` may be a property).
        self.spec_of: dict[str, ToolSpec] = {s.name: s for s in self.specs}
        self._schemas = {s.name: s.parameters for s in self.specs}
        self._checkers = {s.name: ArgumentChecker(s.parameters) for s in self.specs}
        self.bus = bus
        self.timeout = timeout
        self.max_result_chars = max_result_chars

    @property
    def names(self) -> list[str]:
        return list(self.tools)

    def get_openai_tools(self) -> list[dict[str, object]]:
        return [t.to_openai_function() for t in self.tools.values()]

    def resolve(self, name: str) -> str | None:
        """The offered tool ``name`` refers to (case-insensitive), or None."""
        if name in self.tools:
            return name
        return self._lower.get(name.strip().lower())

    async def execute(
        self, call: ToolCall, run: RunContext | None = None, guard: LoopGuard | None = None
    ) -> ToolResult:
        start = time.perf_counter()
        name = call.name
        resolved = name if name in self.tools else self.resolve(name)
        if resolved is None:
            available = ", ".join(self.tools) or "none"
            return _fail(
                call, f"Error: unknown tool {call.name!r}. Available tools: {available}.", start
            )
        tool = self.tools[resolved]
        try:
            params = self._checkers[resolved](
                parse_arguments(call.arguments, self._schemas[resolved])
            )
        except ArgumentError as exc:
            return _fail(call, f"Error: invalid arguments for {resolved}: {exc}", start)
        key = ""
        if guard is not None:
            # LoopGuard.key, whose usual case (one argument) is written out.
            key = f"{resolved}:{params!r}" if len(params) < 2 else LoopGuard.key(resolved, params)
            counts = guard.counts  # one more call of key; how many came before it
            seen = counts.get(key, 0)
            counts[key] = seen + 1
            if seen >= guard.max_repeats:
                last = guard.last.get(key, "")
                return _fail(
                    call,
                    f"Blocked: {resolved} was already called {seen} times with exactly these "
                    f"arguments (its result was: {last[:300]!r}). Do not repeat this call: use "
                    "that result, try different arguments, or give your final answer.",
                    start,
                    blocked=True,
                )
        if run is not None:
            # A call the run has already stopped never starts, so it is never counted.
            if run.cancel.cancelled:
                raise run.cancel.error()
            try:
                # Counted here: from here on it starts, and it counts however it ends.
                run.budget.count_tool_call()
            except BudgetExceeded as exc:
                run.cancel.cancel(str(exc), stop=BudgetExceeded)  # stop every branch
                raise
        bus = run.bus if run is not None else self.bus
        if bus is not None:
            bus.publish(EventType.TOOL_CALL_START, tool=resolved, arguments=params, call_id=call.id)
        token = _CURRENT_RUN.set(run)
        try:
            if run is not None and run.tool_gate is not None:
                allowed = await run.tool_gate(resolved, params, call.id)
            else:
                allowed = True
            if not allowed:
                result = _fail(
                    call,
                    f"Denied: the user did not allow this {resolved} call.",
                    start,
                    denied=True,
                )
            elif self._inline[resolved]:  # cheap sync tools: no task, no timeout machinery
                # Called here, in this frame: every call of the loop's usual tools.
                try:
                    value = tool.execute(**params)
                except _FATAL:
                    raise
                except Exception as exc:
                    result = _fail(
                        call,
                        f"Error: {resolved} failed: {exc}",
                        start,
                        exception=type(exc).__name__,
                    )
                else:
                    if type(value) is str and len(value) <= self.max_result_chars:
                        # The usual result: ToolResult(resolved, value, True, call.id,
                        # latency, {"arguments": params}) without the dataclass's __init__.
                        result = _new(ToolResult)
                        result.tool_name, result.content, result.success = resolved, value, True
                        result.call_id, result.metadata = call.id, {"arguments": params}
                        result.latency_s = time.perf_counter() - start
                    else:
                        result = self._result(value, params, call, resolved, start)
            else:
                result = await self._invoke(tool, params, call, resolved, start)
        finally:
            _CURRENT_RUN.reset(token)
        if guard is not None:
            guard.last[key] = result.content[:300]
        if bus is not None:
            bus.publish(
                EventType.TOOL_CALL_END,
                tool=resolved,
                call_id=call.id,
                success=result.success,
                latency_s=result.latency_s,
                content=result.content[:500],
            )
        return result

    async def _invoke(
        self, tool: BaseTool, params: dict[str, object], call: ToolCall, name: str, start: float
    ) -> ToolResult:
        timeout = tool.timeout or self.timeout
        try:
            if self._threaded[name]:
                value = await asyncio.wait_for(asyncio.to_thread(tool.execute, **params), timeout)
            else:
                value = tool.execute(**params)
            if inspect.isawaitable(value):
                async with asyncio.timeout(timeout):
                    value = await value
        except TimeoutError:
            return _fail(call, f"Error: {name} timed out after {timeout:g} s.", start, timeout=True)
        except _FATAL:
            raise
        except Exception as exc:
            return _fail(call, f"Error: {name} failed: {exc}", start, exception=type(exc).__name__)
        return self._result(value, params, call, name, start)

    def _result(
        self, value: object, params: dict[str, object], call: ToolCall, name: str, start: float
    ) -> ToolResult:
        latency = time.perf_counter() - start
        # The arguments stay with the result: the loop's answer turn lists them.
        if isinstance(value, ToolResult):
            return ToolResult(
                tool_name=name,
                content=self._clip(value.content),
                success=value.success,
                call_id=call.id,
                latency_s=latency,
                metadata={**value.metadata, "arguments": params},
            )
        content = value if type(value) is str else str(value)
        if len(content) > self.max_result_chars:
            content = self._clip(content)
        return ToolResult(name, content, True, call.id, latency, {"arguments": params})

    def _clip(self, content: str) -> str:
        if len(content) <= self.max_result_chars:
            return content
        cut = self.max_result_chars
        return content[:cut] + f"\n[... truncated: {len(content) - cut} more characters]"

    async def execute_all(
        self,
        calls: Sequence[ToolCall],
        run: RunContext | None = None,
        guard: LoopGuard | None = None,
    ) -> list[ToolResult]:
        """Run the calls of one turn, concurrently, results in call order. Calls to cheap
        inline tools run directly (there is nothing to overlap); the rest as tasks that
        race the run's cancel token. On cancellation every call still gets a result."""
        inline = self._inline
        for c in calls:
            if not inline.get(c.name if c.name in inline else self.resolve(c.name) or ""):
                break
        else:  # every call is to a cheap inline tool: one after the other, in this task
            if len(calls) == 1:  # the usual turn: no list comprehension's frame
                return [await self.execute(calls[0], run, guard)]
            return [await self.execute(c, run, guard) for c in calls]
        tasks = [asyncio.ensure_future(self.execute(c, run, guard)) for c in calls]
        # Its outcome may go unread when this call is cancelled while a tool fails: it
        # must not end as "exception was never retrieved" (an unraisable warning).
        gathered = _read_when_done(asyncio.gather(*tasks))
        waiter = asyncio.ensure_future(run.cancel.wait()) if run is not None else None
        pending: set[asyncio.Future[list[ToolResult]] | asyncio.Task[None]] = {gathered}
        if waiter is not None:
            pending.add(waiter)
        try:
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            gathered.cancel()
            await _read_when_done(asyncio.gather(*tasks, return_exceptions=True))
            raise
        finally:
            if waiter is not None:
                waiter.cancel()
        if gathered.done():
            if gathered.exception() is not None:  # a fatal error: stop the other calls
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            return list(gathered.result())
        # Cancelled: stop what still runs; finished calls keep their real results.
        gathered.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if gathered.done() and not gathered.cancelled():  # ended on its own: read its error
            gathered.exception()
        return [
            t.result()
            if t.done() and not t.cancelled() and t.exception() is None
            else cancelled_result(c)
            for c, t in zip(calls, tasks, strict=True)
        ]


def _read_when_done(future: asyncio.Future[_T]) -> asyncio.Future[_T]:
    """``future``, whose exception is read once it is done, whoever awaits it."""
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    return future


def cancelled_result(call: ToolCall) -> ToolResult:
    return ToolResult(
        call.name,
        "Cancelled: the run was stopped before this call finished.",
        False,
        call.id,
        0.0,
        {"cancelled": True},
    )
