"""One run: its cancellation token and budget ledger, shared by every nested agent.

A run is whatever one request started: ``jarvis ask``, a daemon task, a composite
pattern with sub-agents. Everything inside it receives the same :class:`RunContext`
(nested agents get ``run.child()``: the same token, ledger and bus), so cancelling it or
spending its budget stops the whole tree, not only the top agent.

The ledger (:class:`Budget`) counts prompt and completion tokens, engine calls, tool
calls and wall-clock time. Each call *reserves* its worst case before it starts (the
prompt, counted or bounded, plus every completion token it may produce) and holds that
reservation while it is in flight, so concurrent calls (``llm_batch``, a turn's
parallel tool calls, parallel members) each see what the others may still spend, and
no cap is ever passed. When the call ends its :class:`Hold` settles to what it really
used; a call that never ran gives its reservation back. Crossing ``warn_at`` of a cap
publishes one ``BUDGET_WARNING`` per dimension on the run's bus; a call that no longer
fits is refused with :class:`BudgetExceeded`, and the caller stops the run with it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._events import EventBus, EventType
from ._messages import Usage

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "Budget",
    "BudgetExceeded",
    "CancelToken",
    "Cancelled",
    "Hold",
    "RunContext",
    "RunStopped",
    "watch_wall",
]


class RunStopped(Exception):
    """A run was told to stop. Not a JarvisError: nothing went wrong."""

    #: The model turns the stopped run had begun, the one in flight included (set by
    #: the agent loop it stopped): its outcome counts them, not 0.
    turns: int = 0


class Cancelled(RunStopped):
    pass


class BudgetExceeded(RunStopped):
    pass


class CancelToken:
    """Thread-safe, awaitable cancellation flag. It also says *why* the run stopped:
    ``cancel(reason, stop=BudgetExceeded)`` makes every waiter raise that instead of
    :class:`Cancelled` (a spent budget stops the whole tree through the token)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        #: Whether the run was cancelled. A plain attribute (set under the lock, before
        #: the event), not a property: the loop reads it several times a turn, inline.
        #: Written only by :meth:`cancel`.
        self.cancelled = False
        self.reason = ""
        self.stop: type[RunStopped] = Cancelled
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def cancel(self, reason: str = "cancelled", *, stop: type[RunStopped] = Cancelled) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self.stop = stop
            self.cancelled = True
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def error(self) -> RunStopped:
        """The exception that stands for this cancellation (Cancelled, BudgetExceeded)."""
        return self.stop(self.reason)

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
        if self.cancelled:
            raise self.error()

    async def wait(self) -> None:
        # asyncio is imported here, not above: `jarvis ask` builds a RunContext only to
        # hand the question to jarvisd over a blocking socket, and asyncio would cost
        # it tens of milliseconds before the question leaves (tests/test_import_graph.py).
        import asyncio

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
class Hold:
    """What one call in flight holds in a :class:`Budget`. Ended exactly once, by
    :meth:`settle` (the call ran: charge what it used) or :meth:`release` (it never
    ran: give everything back); ending it again does nothing."""

    budget: Budget
    prompt_tokens: int = 0
    #: The most completion tokens the call may produce: its ``max_tokens``.
    completion_tokens: int = 0
    calls: int = 0
    tool_calls: int = 0
    open: bool = True

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def settle(self, usage: Usage) -> None:
        self.budget._end(self, usage)

    def release(self) -> None:
        self.budget._end(self, None)


@dataclass(slots=True)
class Budget:
    """The ledger of one run. Caps of ``None`` are unlimited.

    ``used`` is the real usage of the calls that ended; ``held_tokens`` what the calls
    in flight have reserved on top of it; ``calls`` and ``tool_calls`` count the calls
    that ran or are running (one that is given back stops counting)."""

    max_tokens: int | None = None
    max_calls: int | None = None
    max_tool_calls: int | None = None
    #: Seconds from ``started``; enforced in flight by :func:`watch_wall`.
    max_wall: float | None = None
    #: The fraction of a cap at which one BUDGET_WARNING is published (0: never).
    warn_at: float = 0.8
    used: Usage = field(default_factory=Usage)
    calls: int = 0
    tool_calls: int = 0
    held_tokens: int = 0
    started: float = field(default_factory=time.monotonic)
    #: Whether :func:`watch_wall` has started the clock: a run that runs its agent
    #: more than once (``jarvis code``'s rounds, its candidates) has one clock.
    clock_started: bool = False
    #: Where warnings go; a RunContext sets its own bus here.
    bus: EventBus | None = field(default=None, repr=False, compare=False)
    warned: set[str] = field(default_factory=set, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def reserve(self, prompt_tokens: int, max_new_tokens: int) -> Hold:
        """Hold one engine call about to start: its ``prompt_tokens`` (counted, or an
        upper bound) and up to ``max_new_tokens`` of completion, clamped so that
        everything used and held stays within ``max_tokens``. The returned hold's
        ``completion_tokens`` is the ``max_tokens`` the call may ask for. Raises
        BudgetExceeded when the call cap is reached, or when the prompt and one
        completion token no longer fit."""
        prompt_tokens = prompt_tokens if prompt_tokens > 0 else 0
        if self.max_tokens is None and self.max_calls is None and self.max_wall is None:
            # The usual, uncapped run (every turn comes here): nothing to check, clamp
            # or warn about; the call is only counted and held.
            completion = max_new_tokens if max_new_tokens > 0 else 0
            with self._lock:
                self.calls += 1
                self.held_tokens += prompt_tokens + completion
            # Hold(self, prompt_tokens, completion, 1), without the dataclass's __init__.
            hold = _new(Hold)
            hold.budget, hold.prompt_tokens, hold.completion_tokens = (
                self,
                prompt_tokens,
                completion,
            )
            hold.calls, hold.tool_calls, hold.open = 1, 0, True
            return hold
        with self._lock:
            if self.max_wall is not None:
                self._check_wall()
            if self.max_calls is not None and self.calls >= self.max_calls:
                raise BudgetExceeded(f"call budget of {self.max_calls} engine calls spent")
            completion = max(max_new_tokens, 0)
            if self.max_tokens is not None:
                committed = self.used.total_tokens + self.held_tokens
                left = self.max_tokens - committed
                if left <= 0:
                    raise BudgetExceeded(f"token budget of {self.max_tokens} spent")
                if prompt_tokens >= left:
                    raise BudgetExceeded(
                        f"token budget of {self.max_tokens} spent: {committed} used or in "
                        f"flight, and the next call's prompt alone takes {prompt_tokens}"
                    )
                completion = min(completion, left - prompt_tokens)
            self.calls += 1
            self.held_tokens += prompt_tokens + completion
            if self.max_calls is None:  # nothing to warn about: the usual, uncapped run
                return Hold(self, prompt_tokens, completion, 1)
            warning = self._crossed("calls", self.calls, self.max_calls)
        self._warn(warning)
        return Hold(self, prompt_tokens, completion, 1)

    def reserve_tool_call(self) -> Hold:
        """Hold one tool call about to run (raises when the tool-call cap is reached);
        released, it stops counting."""
        self.count_tool_call()
        return Hold(self, 0, 0, 0, 1)

    def count_tool_call(self) -> None:
        """Count one tool call that starts now, whatever its end (raises when the
        tool-call cap is reached): a tool call charges no tokens, so a call sure to
        start needs no :class:`Hold`."""
        with self._lock:
            if self.max_wall is not None:
                self._check_wall()
            if self.max_tool_calls is None:
                self.tool_calls += 1
                return
            if self.tool_calls >= self.max_tool_calls:
                raise BudgetExceeded(f"tool-call budget of {self.max_tool_calls} calls spent")
            self.tool_calls += 1
            warning = self._crossed("tool_calls", self.tool_calls, self.max_tool_calls)
        self._warn(warning)

    def _end(self, hold: Hold, usage: Usage | None) -> None:
        with self._lock:
            if not hold.open:
                return
            hold.open = False
            self.held_tokens -= hold.prompt_tokens + hold.completion_tokens
            if usage is None:  # it never ran: nothing to charge, nothing counted
                self.calls -= hold.calls
                self.tool_calls -= hold.tool_calls
                return
            if self.max_tokens is None:  # nothing to warn about: add what there is
                if usage.prompt_tokens or usage.completion_tokens:  # (a tool call: none)
                    # self.used + usage, written out (a new Usage: one read before stays
                    # as it was): every engine call of every run ends here.
                    used, total = self.used, _new(Usage)
                    total.prompt_tokens = used.prompt_tokens + usage.prompt_tokens
                    total.completion_tokens = used.completion_tokens + usage.completion_tokens
                    self.used = total
                return
            # The truth, even past the hold: an engine that ignores max_tokens is
            # charged what it did, and later calls see less.
            self.used = self.used + usage
            warning = self._crossed("tokens", self.used.total_tokens, self.max_tokens)
        self._warn(warning)

    def _check_wall(self) -> None:
        if self.max_wall is not None and self.elapsed() >= self.max_wall:
            raise BudgetExceeded(f"wall-clock budget of {self.max_wall:g} s spent")

    def _crossed(self, dimension: str, used: float, limit: float | None) -> dict[str, Any] | None:
        """The warning to publish when ``used`` has just reached ``warn_at`` of
        ``limit`` (once per dimension). Called under the lock."""
        if limit is None or not self.warn_at or dimension in self.warned:
            return None
        if used < limit * self.warn_at:
            return None
        self.warned.add(dimension)
        return {"dimension": dimension, "used": used, "limit": limit, "warn_at": self.warn_at}

    def _warn(self, warning: dict[str, Any] | None) -> None:
        if warning is not None and self.bus is not None:
            self.bus.publish(EventType.BUDGET_WARNING, **warning)


_new = object.__new__


def watch_wall(run: RunContext) -> Callable[[], None]:
    """Start the run's wall clock on the running loop, when its budget has one: at
    ``warn_at`` of it a BUDGET_WARNING, at the end the run is stopped through its token
    (BudgetExceeded), whatever is in flight. Returns a function that disarms both.

    The clock starts once per budget: a later call (the next round of a ``jarvis
    code`` run, another candidate) watches what is left of it, never a new budget."""
    budget = run.budget
    if budget.max_wall is None:
        return lambda: None
    if not budget.clock_started:
        budget.started = time.monotonic()
        budget.clock_started = True
    wall = budget.max_wall
    import asyncio  # not above: see CancelToken.wait

    loop = asyncio.get_running_loop()

    def warn() -> None:
        with budget._lock:
            warning = budget._crossed("wall", budget.elapsed(), wall)
        budget._warn(warning)

    def stop() -> None:
        run.cancel.cancel(f"wall-clock budget of {wall:g} s spent", stop=BudgetExceeded)

    spent = budget.elapsed()
    timers = [loop.call_later(max(wall - spent, 0.0), stop)]
    if budget.warn_at and budget.warn_at < 1 and wall * budget.warn_at > spent:
        timers.append(loop.call_later(wall * budget.warn_at - spent, warn))

    def disarm() -> None:
        for timer in timers:
            timer.cancel()

    return disarm


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
    #: Answers an external agent's permission request under "ask" (an
    #: ``jarvisd.external.Approver``: True allows); None when nobody can answer, which
    #: denies. The daemon's worker sets it for a task; children share it.
    approver: Callable[[Any], Awaitable[bool]] | None = field(
        default=None, repr=False, compare=False
    )
    #: Asked before each tool call of the run, with (tool, arguments, call id), after its
    #: ``tool_call_start``: False denies the call (it fails, the model is told why).
    #: ``jarvis acp`` sets it (the client's ``session/request_permission``); children
    #: share it. None (the default): every call runs.
    tool_gate: Callable[[str, Mapping[str, Any], str], Awaitable[bool]] | None = field(
        default=None, repr=False, compare=False
    )
    #: The text of a file as the user's editor has it (its unsaved buffer), given the
    #: absolute path ``file_read`` resolved and allowed; None: read the disk. Called
    #: from a worker thread. ``jarvis acp`` sets it when the client offers
    #: ``fs/read_text_file``; children share it.
    read_buffer: Callable[[str], str | None] | None = field(default=None, repr=False, compare=False)
    #: The host path of the run's egress proxy socket (``jarvisd.sandbox._netrun``):
    #: the sandboxes the run starts mount it. "" (the default): no network for them.
    egress: str = ""
    #: A ``jarvis code`` run's toolchain (``jarvisd.code._setup``): binds (host path,
    #: path inside, read only) and variables for the agent's sandbox. Set by jarvis only.
    sandbox_binds: tuple[tuple[str, str, bool], ...] = ()
    sandbox_env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.budget.bus is None:  # the ledger's warnings go on the run's bus
            self.budget.bus = self.bus

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
            approver=self.approver,
            tool_gate=self.tool_gate,
            read_buffer=self.read_buffer,
            egress=self.egress,
            sandbox_binds=self.sandbox_binds,
            sandbox_env=self.sandbox_env,
        )
