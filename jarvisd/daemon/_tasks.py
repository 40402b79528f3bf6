"""Scheduling, running and recovering tasks.

Each running task is a worker process (``jarvisd.daemon._worker``) speaking frames v1.
Everything it reports is stored before the daemon answers its barrier pings, so the
store always holds a true prefix of what happened. Recovery after a crash reads that
prefix and decides, per task, with no guessing:

* a tool call started and never ended: its effect is unverified. The task is marked
  ``interrupted`` and the call gets a synthetic ``effect_unverified`` end event; nothing
  is replayed on its own.
* tool calls completed after the last checkpoint: resuming would replay them, so the
  task is ``interrupted`` too.
* otherwise the task is queued again and resumes from its last checkpoint (the last
  completed model turn), with a ``task_resumed`` event saying so.

When the store cannot be written (a full disk), nothing a worker does next could be
recorded: its whole process tree is ended at once, scheduling pauses (``store_error``
says why, in ``daemon status`` too), and the write that failed is tried again every
second. Once it goes through, the task is settled as above and everything resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from jarvisd._config import Config
from jarvisd._errors import QueueFull, ShuttingDown, StoreError, UsageError
from jarvisd._procs import EXIT_HOST_GONE
from jarvisd.cluster import backend_for
from jarvisd.protocol import Start, encode
from jarvisd.runs import AgentSpec

from ._proctree import end_processes, kill_stale_worker, kill_tree, snapshot_tree
from ._protocol import TaskInfo
from ._store import TaskStore
from ._taskrun import SHUTDOWN_REASON, WORKER_FRAME_LIMIT, TaskRun

__all__ = ["SHUTDOWN_REASON", "TaskManager"]

log = logging.getLogger(__name__)

#: A task that was running during this many daemon crashes is not resumed again (it may
#: be what brings the daemon down). Orderly shutdowns do not count.
MAX_ATTEMPTS = 3
_SAMPLE_EVERY_S = 1.0
#: How often a failed store write is tried again, and the WAL's link count looked at.
_STORE_RETRY_S = 1.0
#: How often the WAL is checkpointed into the database (PASSIVE: it never waits).
_CHECKPOINT_EVERY_S = 10.0


class TaskManager:
    def __init__(
        self,
        store: TaskStore,
        config: Callable[[], Config],
        *,
        python: str = sys.executable,
        cancel_grace: float = 5.0,
    ) -> None:
        self.store = store
        self._config = config
        self._python = python
        self.cancel_grace = cancel_grace
        self._queue: deque[str] = deque()
        self._running: dict[str, TaskRun] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self._scheduler: asyncio.Task[None] | None = None
        self._sampler: asyncio.Task[None] | None = None
        self._runners: set[asyncio.Task[None]] = set()
        self._starting: set[str] = set()
        self._keeper: asyncio.Task[None] | None = None
        #: Why the store cannot be written (empty: it can). Scheduling waits meanwhile.
        self.store_error = ""
        #: Tasks whose worker was ended by a store failure: the write to try again.
        self._stalled: dict[str, Callable[[], None]] = {}
        #: Cancels of stalled tasks, stored with their end.
        self._stall_cancels: dict[str, str] = {}
        store.on_error = self._store_failed
        #: Called with a task id whenever a task reaches a final state.
        self.on_finished: Callable[[str], None] | None = None

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        self.recover()
        self._scheduler = asyncio.create_task(self._schedule(), name="jarvisd-scheduler")
        self._sampler = asyncio.create_task(self._sample(), name="jarvisd-sampler")
        self._keeper = asyncio.create_task(self._keep_store(), name="jarvisd-store-keeper")

    async def stop(self) -> None:
        """Stop every running task at its next safe point and record it for resuming."""
        self._stopping = True
        self._wake.set()
        for rt in list(self._running.values()):
            rt.signal_cancel(SHUTDOWN_REASON)
        if self._runners:
            await asyncio.wait(self._runners, timeout=self.cancel_grace + 5)
        with contextlib.suppress(StoreError):  # else the next start recovers them
            self._retry_stalled()
        for task in (self._scheduler, self._sampler, self._keeper):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def recover(self) -> None:
        """Settle what a previous daemon left: see the module docstring."""
        for task_id in self.store.ids_in("running"):
            pid, started = self.store.worker_of(task_id)
            if kill_stale_worker(pid, started):
                log.warning(
                    "task %s: ended a worker (pid %s) left by a previous daemon", task_id, pid
                )
            self._settle_interrupted(
                task_id, "the daemon stopped while it was running", crashed=True
            )
        for task_id in self.store.ids_in("queued"):
            self._queue.append(task_id)
        self._wake.set()

    def _settle_interrupted(self, task_id: str, why: str, *, crashed: bool) -> None:
        """A task stopped mid-run, by a daemon crash or an orderly shutdown: resume it
        or mark it interrupted (see the module docstring). Only crashes count towards
        MAX_ATTEMPTS: restarting the daemon is no reason to give up on a task."""
        cp = self.store.checkpoint(task_id)
        in_flight = self.store.open_tool_calls(task_id)
        if in_flight:
            for call in in_flight:
                self.store.append_event(
                    task_id,
                    "tool_call_end",
                    {
                        "tool": call.get("tool"),
                        "call_id": call.get("call_id"),
                        "success": False,
                        "status": "effect_unverified",
                        "synthetic": True,
                        "content": f"{why}: this call may or may not have taken effect",
                    },
                )
            names = ", ".join(f"{c.get('tool')} ({c.get('call_id')})" for c in in_flight)
            self._finish(
                task_id,
                "interrupted",
                f"{why}; tool call {names} was in flight: effect unverified, not replayed "
                "(check its effect, then resubmit)",
            )
        elif cp.state is not None and cp.state.get("resumable") is False:
            # A run that said it cannot be resumed (a sandboxed run) is never restarted.
            reason = str(cp.state.get("reason") or "its run cannot be resumed")
            self._finish(task_id, "interrupted", f"{why}; {reason}")
        elif self.store.tool_calls_since(task_id, cp.seq):
            self._finish(
                task_id,
                "interrupted",
                f"{why}; tool calls completed after the last checkpoint would be replayed by "
                "a resume, so it was not resumed (resubmit to run again)",
            )
        elif crashed and (crashes := self.store.crash_resumes(task_id) + 1) >= MAX_ATTEMPTS:
            self._finish(
                task_id,
                "interrupted",
                f"{why}; not resumed: the daemon died {crashes} times while it ran",
            )
        else:
            self.store.append_event(
                task_id,
                "task_resumed",
                {
                    "reason": why,
                    "from_turn": cp.turns if cp.state is not None else 0,
                    "checkpoint_seq": cp.seq,
                    "crash": crashed,
                },
            )
            self.store.requeue(task_id, f"{why}; resuming from turn {cp.turns}")
            self._notify(task_id)

    # -- requests -------------------------------------------------------------------

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def stalled(self) -> int:
        """Tasks stopped by a store failure, waiting for their state to be written."""
        return len(self._stalled)

    def queue_full(self) -> bool:
        return len(self._queue) >= self._config().daemon.max_queued

    def submit(
        self,
        spec: AgentSpec,
        *,
        watch: str | None = None,
        timeout: float | None = None,
        rerun_of: str | None = None,
    ) -> TaskInfo:
        if self._stopping:
            raise ShuttingDown("the daemon is shutting down")
        if self.queue_full():
            raise QueueFull(f"the queue is full ({self._config().daemon.max_queued} tasks)")
        info = self.store.create(spec, watch=watch, timeout=timeout, rerun_of=rerun_of)
        self._queue.append(info.id)
        self._wake.set()
        return info

    def show(self, ref: str) -> TaskInfo:
        info = self.store.get(ref)
        rt = self._running.get(info.id)
        if rt is not None:
            rt.observe(*snapshot_tree(rt.proc.pid))
            return self.live(_with_usage(info, rt.cpu_seconds, rt.memory_bytes))
        return info

    def live(self, info: TaskInfo) -> TaskInfo:
        """``info`` with what only the running daemon knows: the approval it waits on."""
        from dataclasses import replace

        rt = self._running.get(info.id)
        if rt is None or rt.approval is None:
            return info
        return replace(info, waiting=rt.approval.waiting)

    def answer(self, ref: str, allow: bool) -> TaskInfo:
        """``jarvis task approve|deny``: answer the permission request ``ref`` waits on."""
        info = self.store.get(ref)
        rt = self._running.get(info.id)
        if rt is None or rt.approval is None or rt.cancel_reason:
            raise UsageError(f"task {info.id} is not waiting for approval (it is {info.state})")
        rt.answer(allow, "approved by the user" if allow else "denied by the user")
        return self.show(info.id)

    async def cancel(self, ref: str, reason: str = "cancelled by the user") -> TaskInfo:
        info = self.store.get(ref)
        if info.id in self._stalled:  # its worker is gone already: only its end is left
            self._stall_cancels.setdefault(info.id, reason)
            try:
                self._retry_stalled()
            except StoreError as exc:
                raise StoreError(f"{exc} (the cancel is kept, and stored once it can be)") from exc
            return self.store.get(info.id)
        self.store.stop_watching(info.id)
        if info.state == "queued":
            with contextlib.suppress(ValueError):
                self._queue.remove(info.id)
            self._finish(info.id, "cancelled", reason)
        elif info.id in self._running:
            self._running[info.id].signal_cancel(reason)
        return self.store.get(info.id)

    def changed(self, task_id: str) -> asyncio.Event:
        """An event set at the next new event or state of ``task_id``. Take it *before*
        reading the store, so nothing that happens in between is missed."""
        return self._changed.setdefault(task_id, asyncio.Event())

    def _notify(self, task_id: str) -> None:
        event = self._changed.pop(task_id, None)
        if event is not None:
            event.set()

    def _finish(
        self,
        task_id: str,
        state: str,
        reason: str = "",
        result: Any = None,
        cpu: float | None = None,
        mem: int | None = None,
    ) -> None:
        self.store.finish(task_id, state, reason, result, cpu_seconds=cpu, memory_bytes=mem)
        self.store.append_event(task_id, "task_end", {"state": state, "reason": reason})
        self._notify(task_id)
        if self.on_finished is not None:
            self.on_finished(task_id)

    # -- running --------------------------------------------------------------------

    async def _schedule(self) -> None:
        while not self._stopping:
            limit = self._config().daemon.max_concurrent
            # Answered approvals take their slot back first, then queued tasks start.
            for rt in list(self._running.values()):
                if rt.answered is not None and rt.approval is None and self._busy() < limit:
                    answer, rt.answered = rt.answered, None
                    rt.write(encode(answer))
            while self._queue and not self.store_error and self._busy() < limit:
                task_id = self._queue.popleft()
                self._starting.add(task_id)
                runner = asyncio.create_task(self._run(task_id), name=f"task-{task_id}")
                self._runners.add(runner)
                runner.add_done_callback(self._runners.discard)
            self._wake.clear()
            await self._wake.wait()

    def _busy(self) -> int:
        """Slots of ``max_concurrent`` taken: starting tasks, running ones that do not
        wait for an approval."""
        return len(self._starting) + sum(rt.holds_slot for rt in self._running.values())

    async def _run(self, task_id: str) -> None:
        try:
            await self._run_worker(task_id)
        except StoreError as exc:
            await self._stall(task_id, str(exc))
        except Exception as exc:  # one task's failure must not stop the scheduler
            log.exception("task %s: the daemon failed running it", task_id)
            with contextlib.suppress(Exception):
                self._finish(task_id, "failed", f"internal error in the daemon: {exc}")
        finally:
            self._starting.discard(task_id)
            rt = self._running.pop(task_id, None)
            if rt is not None:
                for timer in rt.timers:
                    timer.cancel()
            self._wake.set()

    async def _run_worker(self, task_id: str) -> None:
        info = self.store.get(task_id)
        if info.state != "queued":  # cancelled while it waited
            return
        config = self._config()
        cp = self.store.checkpoint(task_id)
        # The worker, or on a cluster its relay: the same frames either way.
        backend = backend_for(config)
        proc = await backend.spawn(self._python, info.spec, config, WORKER_FRAME_LIMIT)
        assert proc.stdin is not None and proc.stdout is not None
        if self.store.get(task_id).state != "queued":  # cancelled while the worker started
            proc.kill()
            await proc.wait()
            return
        rt = TaskRun(
            task_id,
            proc,
            time.time(),
            self.store,
            self._notify,
            self._wake.set,
            lambda: self._config().agents.approval_timeout,
            self.cancel_grace,
        )
        self._running[task_id] = rt
        self._starting.discard(task_id)
        try:
            import psutil

            created = psutil.Process(proc.pid).create_time()
        except Exception:
            created = None
        self.store.mark_running(task_id, proc.pid, created or time.time())
        self.store.append_event(
            task_id,
            "task_start",
            {
                "attempt": info.attempts + 1,
                "worker_pid": proc.pid,
                "node": backend.name,  # until the cluster places it (a task_placed event)
                "resume_from_turn": cp.turns if cp.state is not None else 0,
            },
        )
        self._notify(task_id)
        limit = info.timeout or config.daemon.task_timeout
        loop = asyncio.get_running_loop()
        rt.timers.append(
            loop.call_later(limit, rt.signal_cancel, f"time limit of {limit:g} s reached")
        )
        start = Start(
            task="agent",
            payload={
                "task_id": task_id,
                "spec": info.spec.to_dict(),
                "config": config.to_dict(),
                "config_source": config.source or "",
                "resume": cp.state,
            },
        )
        rt.write(encode(start))
        if self._stopping:
            rt.signal_cancel(SHUTDOWN_REASON)
        await rt.pump()
        returncode = await proc.wait()
        if rt.killer is not None:
            rt.killer.cancel()
        # Subprocesses a tool started must not outlive the task: those still in the
        # worker's process group (even re-parented), and every descendant ever seen.
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        end_processes(rt.seen.values())
        self._settle(rt, returncode)

    def _settle(self, rt: TaskRun, returncode: int) -> None:
        rt.returncode = returncode
        task_id = rt.task_id
        cpu, mem = rt.cpu_seconds, rt.memory_bytes
        outcome = rt.outcome
        if rt.cancel_reason == SHUTDOWN_REASON and (outcome is None or outcome[0] != "succeeded"):
            self.store.set_usage(task_id, cpu, mem)
            self._settle_interrupted(task_id, "the daemon was shut down", crashed=False)
            return
        if outcome is None and returncode == EXIT_HOST_GONE and not rt.cancel_reason:
            # The worker lost its link to the daemon (its pipe closed or broke): an
            # interruption like a daemon crash, not the run's failure. Resumed as one,
            # so a worker that keeps losing it is not resumed for ever (MAX_ATTEMPTS).
            self.store.set_usage(task_id, cpu, mem)
            self._settle_interrupted(
                task_id, "the worker lost its link to the daemon", crashed=True
            )
            if self.store.get(task_id).state == "queued" and task_id not in self._queue:
                self._queue.append(task_id)
                self._wake.set()
            return
        if outcome is None:
            how = f"signal {-returncode}" if returncode < 0 else f"code {returncode}"
            if rt.cancel_reason:
                outcome = ("cancelled", rt.cancel_reason, None)
            else:
                outcome = ("failed", f"the worker exited with {how} before a result", None)
        state, reason, result = outcome
        if state == "cancelled" and rt.cancel_reason:
            reason = rt.cancel_reason
        self._close_open_calls(
            task_id, "cancelled" if state == "cancelled" else "effect_unverified", reason
        )
        self._finish(task_id, state, reason, result, cpu, mem)

    def _close_open_calls(self, task_id: str, status: str, reason: str) -> None:
        """Every tool call gets an end: a synthetic one when the run stopped mid-call."""
        for call in self.store.open_tool_calls(task_id):
            self.store.append_event(
                task_id,
                "tool_call_end",
                {
                    "tool": call.get("tool"),
                    "call_id": call.get("call_id"),
                    "success": False,
                    "status": status,
                    "synthetic": True,
                    "content": f"{status}: {reason}",
                },
            )

    # -- store failures -------------------------------------------------------------

    def _store_failed(self, error: StoreError) -> None:
        if not self.store_error:
            log.error(
                "the task store failed: %s; no task starts until it can be written "
                "again (tried every %g s)",
                error,
                _STORE_RETRY_S,
            )
        self.store_error = str(error)

    async def _stall(self, task_id: str, error: str) -> None:
        """A write for ``task_id`` failed: end its worker (nothing it does next could be
        recorded) and keep the task, to be settled once the store works again."""
        rt = self._running.get(task_id)
        if rt is not None and rt.returncode is not None:  # it ended: store its outcome
            returncode = rt.returncode
            self._stalled[task_id] = lambda: self._settle(rt, returncode)
            return
        if rt is not None:  # still running
            log.warning("task %s: ending its worker: its events cannot be stored", task_id)
            await asyncio.to_thread(kill_tree, rt.proc.pid, 0.2)
            with contextlib.suppress(OSError):
                os.killpg(rt.proc.pid, signal.SIGKILL)
            end_processes(rt.seen.values())
            await rt.proc.wait()
            if rt.killer is not None:
                rt.killer.cancel()
        why = f"the task store failed ({error})"
        self._stalled[task_id] = lambda: self._resettle(task_id, why)

    def _resettle(self, task_id: str, why: str) -> None:
        """Resume (or mark interrupted) a task whose worker a store failure ended; or
        end it, when it was cancelled meanwhile."""
        cancel = self._stall_cancels.get(task_id)
        if cancel is not None and not self.store.get(task_id).finished:
            self.store.stop_watching(task_id)
            self._close_open_calls(task_id, "cancelled", cancel)
            self._finish(task_id, "cancelled", cancel)
        elif self.store.get(task_id).state == "running":
            self._settle_interrupted(task_id, why, crashed=False)
        if self.store.get(task_id).state == "queued" and task_id not in self._queue:
            self._queue.append(task_id)

    def _retry_stalled(self) -> None:
        for task_id, write in list(self._stalled.items()):
            write()  # raises StoreError while the store still fails
            del self._stalled[task_id]
            self._stall_cancels.pop(task_id, None)

    async def _keep_store(self) -> None:
        """Try failed writes again until they go through; keep the WAL checkpointed."""
        checkpointed = time.monotonic()
        while True:
            await asyncio.sleep(_STORE_RETRY_S)
            try:
                if self.store_error:
                    self._retry_stalled()
                    self.store.probe()
                    log.warning("the task store can be written again: scheduling resumes")
                    self.store_error = ""
                    self._wake.set()
                if (
                    self.store.wal_deleted()
                    or time.monotonic() - checkpointed > _CHECKPOINT_EVERY_S
                ):
                    self.store.keep_wal()
                    checkpointed = time.monotonic()
            except StoreError:
                continue  # on_error has recorded it
            except Exception:  # the keeper must outlive any one failure
                log.exception("task store upkeep failed")

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(_SAMPLE_EVERY_S)
            for rt in list(self._running.values()):
                rt.observe(*await asyncio.to_thread(snapshot_tree, rt.proc.pid))


def _with_usage(info: TaskInfo, cpu: float, mem: int) -> TaskInfo:
    from dataclasses import replace

    return replace(info, cpu_seconds=cpu, memory_bytes=mem)
