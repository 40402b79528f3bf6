"""One run: its cancellation token and budget ledger, shared by every nested agent.

A run is whatever one request started: ``jarvis ask``, a daemon task, a composite
pattern with sub-agents. Everything inside it receives the same :class:`RunContext`, so
cancelling it or exhausting its budget stops the whole tree, not only the top agent.
Budgets are checked *before* each engine call against what that call could spend, so a
run never overshoots by a whole call.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._events import EventBus
from ._messages import Usage

__all__ = ["Budget", "BudgetExceeded", "CancelToken", "Cancelled", "RunContext", "RunStopped"]


class RunStopped(Exception):
    """A run was told to stop. Not a JarvisError: nothing went wrong."""


class Cancelled(RunStopped):
    pass


class BudgetExceeded(RunStopped):
    pass


class CancelToken:
    """Thread-safe, awaitable cancellation flag."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: str = "cancelled") -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` once on cancellation (at once if already cancelled).
        Returns a function that removes it."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return lambda: self._remove(callback)
        callback()
        return lambda: None

    def _remove(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise Cancelled(self.reason)

    async def wait(self) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def resolve() -> None:
            if not future.done():
                future.set_result(None)

        def wake() -> None:
            loop.call_soon_threadsafe(resolve)

        remove = self.on_cancel(wake)
        try:
            await future
        finally:
            remove()


@dataclass(slots=True)
class Budget:
    """Limits for one run. ``None`` means unlimited."""

    max_tokens: int | None = None
    max_calls: int | None = None
    max_tool_calls: int | None = None
    used: Usage = field(default_factory=Usage)
    calls: int = 0
    tool_calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def reserve(self, max_new_tokens: int) -> int:
        """Account for one engine call about to start; returns the completion tokens it
        may use so the total can never pass ``max_tokens``."""
        with self._lock:
            if self.max_calls is not None and self.calls >= self.max_calls:
                raise BudgetExceeded(f"call budget of {self.max_calls} engine calls spent")
            allowed = max_new_tokens
            if self.max_tokens is not None:
                left = self.max_tokens - self.used.total_tokens
                if left <= 0:
                    raise BudgetExceeded(f"token budget of {self.max_tokens} spent")
                allowed = min(allowed, left)
            self.calls += 1
            return allowed

    def reserve_tool_call(self) -> None:
        """Account for one tool call about to run (raises when the budget is spent)."""
        with self._lock:
            if self.max_tool_calls is not None and self.tool_calls >= self.max_tool_calls:
                raise BudgetExceeded(f"tool-call budget of {self.max_tool_calls} calls spent")
            self.tool_calls += 1

    def charge(self, usage: Usage) -> None:
        with self._lock:
            self.used = self.used + usage


@dataclass(slots=True)
class RunContext:
    """Shared by every agent, tool and engine call of one run."""

    bus: EventBus = field(default_factory=EventBus)
    budget: Budget = field(default_factory=Budget)
    cancel: CancelToken = field(default_factory=CancelToken)
    run_id: str = ""
    #: Receives streamed text as the final answer is generated (None: no streaming).
    on_delta: Callable[[str], None] | None = None
    depth: int = 0
    #: Called by the top agent's loop after each completed model turn (and the tool
    #: results it led to) with a JSON-able state; the daemon persists it.
    checkpoint: Callable[[Mapping[str, Any]], None] | None = None
    #: A state saved by ``checkpoint``: the top agent continues from it instead of
    #: starting over.
    resume: Mapping[str, Any] | None = None
    #: Engines bound to this run's token, ledger and bus (``RunEngine.bind``), shared
    #: with child contexts, which have the same three.
    bound_engines: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)

    def child(self) -> RunContext:
        """Context for a nested agent: same token, ledger and bus; one level deeper;
        no streaming, checkpoints or resume (those belong to the top agent)."""
        return RunContext(
            self.bus,
            self.budget,
            self.cancel,
            self.run_id,
            None,
            self.depth + 1,
            bound_engines=self.bound_engines,
        )
