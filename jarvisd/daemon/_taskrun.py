"""One running task on the daemon's side: its worker process, the frames it sends
(events, checkpoints, barrier pings, permission requests, its outcome) and those sent
to it (cancel, pong, approval). ``TaskManager`` schedules runs and settles their ends;
this is what happens in between. See ``_worker`` for the other end of the pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jarvisd._errors import ProtocolError, StoreError
from jarvisd.protocol import (
    Approval,
    Approve,
    Cancel,
    ErrorFrame,
    EventFrame,
    FrameError,
    Ping,
    Pong,
    ResultFrame,
    decode_line,
    encode,
)
from jarvisd.runs import Failure, RunOutcome

from ._proctree import kill_tree, running_now, snapshot_tree
from ._protocol import CHECKPOINT_EVENT, Waiting
from ._store import TaskStore

if TYPE_CHECKING:
    from psutil import Process

__all__ = ["SHUTDOWN_REASON", "WORKER_FRAME_LIMIT", "TaskRun"]

log = logging.getLogger(__name__)

SHUTDOWN_REASON = "daemon shutdown"
WORKER_FRAME_LIMIT = 64 * 1024 * 1024
_SEEN_PRUNE_AT = 64
#: How much of a permission request's text is stored and shown (an agent writes it).
_APPROVAL_TOOL_CHARS = 200
_APPROVAL_ARGS_CHARS = 2000


@dataclass(slots=True)
class _Approval:
    """The permission request a task waits on: the worker's approve frame id, what
    `task show` says, and the timer that denies it unanswered."""

    frame_id: str
    waiting: Waiting
    timer: asyncio.TimerHandle


@dataclass(slots=True)
class TaskRun:
    """One running task: its worker process and the frames between them."""

    task_id: str
    proc: asyncio.subprocess.Process
    started: float
    store: TaskStore
    #: The manager's hooks: a task's news (events, state), and "a slot may be free".
    notify: Callable[[str], None]
    wake: Callable[[], None]
    approval_timeout: Callable[[], float]
    cancel_grace: float
    cancel_reason: str = ""
    outcome: tuple[str, str, dict[str, Any] | None] | None = None
    cpu_seconds: float = 0.0
    memory_bytes: int = 0
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    killer: asyncio.Task[None] | None = None
    #: Every descendant of the worker seen so far, by pid: none may outlive the task,
    #: including those that left the worker's process group (setsid) or were re-parented.
    seen: dict[int, Process] = field(default_factory=dict)
    #: Set once the worker has ended and its outcome is being stored.
    returncode: int | None = None
    approval: _Approval | None = None
    #: The answer to its approval, held until a slot is free to give it back to.
    answered: Approval | None = None

    @property
    def holds_slot(self) -> bool:
        """A task waiting for a person (or for a slot after the answer) holds none of
        ``max_concurrent``: other tasks start meanwhile."""
        return self.approval is None and self.answered is None

    def write(self, data: bytes) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            stdin.write(data)

    async def pump(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        while True:
            try:
                line = await stdout.readline()
            except ValueError:  # a line over the limit: the worker is broken
                log.error("task %s: oversized frame from the worker", self.task_id)
                kill_tree(self.proc.pid, grace=0.2)
                self.outcome = ("failed", "the worker sent an oversized frame", None)
                return
            if not line:
                return
            try:
                frame = decode_line(line, WORKER_FRAME_LIMIT)
            except FrameError as exc:
                log.error("task %s: bad frame from the worker: %s", self.task_id, exc)
                continue
            if frame is None:
                log.info(
                    "task %s: worker output: %s",
                    self.task_id,
                    line.decode(errors="replace").rstrip(),
                )
            elif isinstance(frame, EventFrame):
                if frame.type == CHECKPOINT_EVENT:
                    self.store.save_checkpoint(self.task_id, frame.data)
                else:
                    self.store.append_event(self.task_id, frame.type, frame.data)
                    self.notify(self.task_id)
            elif isinstance(frame, Ping):
                # Everything before this ping is committed: answer the barrier.
                self.write(encode(Pong(id=frame.id)))
            elif isinstance(frame, Approve):
                self.asked(frame)
            elif isinstance(frame, ResultFrame | ErrorFrame):
                # The worker waits for our barrier answer: measure it while it is alive.
                self.observe(*snapshot_tree(self.proc.pid))
                self.record_outcome(frame)

    def asked(self, frame: Approve) -> None:
        """The worker's agent asks to run a tool under "ask": the task waits, visibly,
        until `task approve|deny` or the timeout (which denies)."""
        if self.approval is not None or self.cancel_reason:
            # One question at a time; and a task being stopped runs nothing more.
            why = "another request is waiting" if self.approval is not None else "cancelled"
            self.write(encode(Approval(id=frame.id, allowed=False, reason=why)))
            return
        import json

        from jarvisd.external._mapping import clip

        timeout = self.approval_timeout()
        now = time.time()
        waiting = Waiting(
            clip(frame.tool, _APPROVAL_TOOL_CHARS),
            clip(frame.tool_kind, _APPROVAL_TOOL_CHARS),
            now,
            now + timeout,
        )
        arguments = clip(json.dumps(frame.arguments, default=str), _APPROVAL_ARGS_CHARS)
        self.store.append_event(
            self.task_id,
            "approval_requested",
            {
                "tool": waiting.tool,
                "kind": waiting.kind,
                "arguments": arguments,
                "timeout": timeout,
            },
        )
        timer = asyncio.get_running_loop().call_later(
            timeout, self.answer_timeout, f"no answer within {timeout:g} s"
        )
        self.timers.append(timer)
        self.approval = _Approval(frame.id, waiting, timer)
        self.notify(self.task_id)
        self.wake()  # its slot is free while it waits

    def answer_timeout(self, why: str) -> None:
        with contextlib.suppress(StoreError):  # denied whether or not it can be recorded
            self.answer(False, why)

    def answer(self, allowed: bool, by: str) -> None:
        pending, self.approval = self.approval, None
        if pending is None:
            return
        pending.timer.cancel()
        try:
            self.store.append_event(
                self.task_id,
                "approval",
                {
                    "tool": pending.waiting.tool,
                    "kind": pending.waiting.kind,
                    "allowed": allowed,
                    "by": by,
                },
            )
        finally:
            # Given to the worker once the task has its slot back (the scheduler).
            self.answered = Approval(id=pending.frame_id, allowed=allowed, reason=by)
            self.wake()
            self.notify(self.task_id)

    def observe(self, procs: list[Process], cpu: float, mem: int) -> None:
        """Record a snapshot of the worker's tree: its usage, and its descendants."""
        if mem:
            self.cpu_seconds, self.memory_bytes = max(cpu, self.cpu_seconds), mem
        if len(self.seen) > _SEEN_PRUNE_AT:  # forget those already gone
            self.seen = {pid: p for pid, p in self.seen.items() if running_now(p)}
        for proc in procs[1:]:
            self.seen.setdefault(proc.pid, proc)

    def record_outcome(self, frame: ResultFrame | ErrorFrame) -> None:
        """A task ends as its run's outcome says: succeeded with an answer, cancelled,
        or failed with the failure's code (the one table: ``jarvisd.runs._failures``).
        The outcome is stored either way, so ``task show`` has turns, usage and the code."""
        failure: Failure | None
        result: dict[str, Any] | None
        if isinstance(frame, ErrorFrame):
            failure, result = Failure(frame.code, frame.message), None
        else:
            try:
                outcome = RunOutcome.from_dict(frame.result)
            except ProtocolError as exc:
                self.outcome = ("failed", f"protocol: the worker sent {exc}", None)
                return
            failure, result = outcome.failure, outcome.to_dict()
        if self.cancel_reason and self.cancel_reason != SHUTDOWN_REASON:
            # A cancel or time limit that came before the outcome wins: the user was
            # told it stops, and a late answer must not turn that into a success.
            # (One finished before a shutdown is kept: nothing is left to resume.)
            self.outcome = ("cancelled", self.cancel_reason, result)
        elif failure is None:
            self.outcome = ("succeeded", "", result)
        elif failure.code == "cancelled":
            self.outcome = ("cancelled", failure.message, result)
        else:
            self.outcome = ("failed", f"{failure.code}: {failure.message}", result)

    def signal_cancel(self, reason: str) -> None:
        if self.cancel_reason:
            return
        self.cancel_reason = reason
        if self.approval is not None:  # the worker denies it itself on the cancel
            self.approval.timer.cancel()
            self.approval = None
        self.answered = None
        log.info("task %s: cancelling (%s)", self.task_id, reason)
        self.observe(*snapshot_tree(self.proc.pid))  # what runs now must end with it
        self.write(encode(Cancel(reason=reason)))
        self.killer = asyncio.create_task(self.kill_after(self.cancel_grace))

    async def kill_after(self, grace: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), grace)
            return
        log.warning(
            "task %s: worker still running %.1f s after cancel: killing it", self.task_id, grace
        )
        await asyncio.to_thread(kill_tree, self.proc.pid, 1.0)
