"""The daemon's side of ``ask``: questions answered in worker processes
(``_askworker``), never in the daemon itself.

A model loaded for an answer, a crash in an engine or a sandboxed run that floods its
output stays in a worker: the daemon's memory stays small and it survives them. One
worker waits, started and imported, before any question comes, so an answer costs no
process start; after a question a worker keeps its engines warm for the next one, until
it has been idle for ``daemon.ask_idle_unload`` seconds and exits to free them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jarvisd._config import Config
from jarvisd._errors import ProtocolError
from jarvisd._runcontext import CancelToken
from jarvisd.protocol import (
    Cancel,
    EventFrame,
    Frame,
    FrameError,
    Ping,
    Pong,
    ResultFrame,
    Start,
    decode_line,
    encode,
)
from jarvisd.runs import AgentSpec, Failure, RunOutcome

__all__ = ["AskPool"]

log = logging.getLogger(__name__)

_FRAME_LIMIT = 64 * 1024 * 1024
#: A warm worker answers a ping at once; one that does not is treated as gone.
_READY_TIMEOUT_S = 10.0
#: How often a busy worker that sent nothing is looked at, and how long it may be
#: stopped (SIGSTOP, a debugger) before its question fails: the client is told, not
#: kept waiting on the daemon's "alive" for ever.
_PROBE_EVERY_S = 5.0
STOPPED_LIMIT_S = 60.0


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state T, or t under a tracer)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # "pid (comm) S ...": the command may hold spaces and parentheses.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return bool(fields) and fields[0] in (b"T", b"t")


@dataclass(eq=False)
class _Worker:
    proc: asyncio.subprocess.Process
    busy: bool = False
    answered: int = 0
    stderr_tail: list[str] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None


class AskPool:
    """At most ``size()`` workers; questions beyond that wait for one to be free."""

    def __init__(self, config: Callable[[], Config], python: str = sys.executable) -> None:
        self._config = config
        self._python = python
        self._workers: list[_Worker] = []
        self._free = asyncio.Condition()
        self._spawning = 0
        self._closed = False
        self._reapers: set[asyncio.Task[None]] = set()

    def size(self) -> int:
        return max(2, self._config().daemon.max_concurrent)

    @property
    def workers(self) -> int:
        return len([w for w in self._workers if w.alive])

    async def start(self) -> None:
        """Start the first worker ahead of any question."""
        await self._spawn()

    async def stop(self) -> None:
        self._closed = True
        for worker in self._workers:
            if worker.alive:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
        await asyncio.gather(*(w.proc.wait() for w in self._workers), return_exceptions=True)
        self._workers.clear()

    async def _spawn(self) -> _Worker | None:
        if self._closed:
            return None
        self._spawning += 1
        try:
            proc = await asyncio.create_subprocess_exec(
                self._python,
                "-m",
                "jarvisd.daemon._askworker",
                str(self._config().daemon.ask_idle_unload),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                start_new_session=True,  # the terminal's ^C is the daemon's
                limit=_FRAME_LIMIT,
            )
        finally:
            self._spawning -= 1
        worker = _Worker(proc)
        self._workers.append(worker)
        task = asyncio.create_task(self._reap(worker))
        self._reapers.add(task)  # asyncio keeps only a weak reference to a task
        task.add_done_callback(self._reapers.discard)
        return worker

    async def _reap(self, worker: _Worker) -> None:
        """When a worker ends (idle, crash), forget it; keep one ready if none is."""
        await worker.proc.wait()
        if worker.busy:
            return  # the question it was answering reports it
        self._forget(worker)
        if not self._closed and not any(w.alive for w in self._workers):
            await self._spawn()

    def _forget(self, worker: _Worker) -> None:
        with contextlib.suppress(ValueError):
            self._workers.remove(worker)

    async def _take(self) -> _Worker:
        async with self._free:
            while True:
                idle = [w for w in self._workers if w.alive and not w.busy]
                if idle:
                    # The one that answered last most likely has the model loaded.
                    worker = max(idle, key=lambda w: w.answered)
                    worker.busy = True
                    return worker
                if self.workers + self._spawning < self.size():
                    spawned = await self._spawn()
                    if spawned is not None:
                        spawned.busy = True
                        return spawned
                await self._free.wait()

    async def _release(self, worker: _Worker) -> None:
        worker.busy = False
        if not worker.alive:
            self._forget(worker)
        async with self._free:
            self._free.notify()

    async def ask(
        self, spec: AgentSpec, cancel: CancelToken, *, gone: Callable[[], bool] = lambda: False
    ) -> AsyncIterator[EventFrame | RunOutcome]:
        """Answer ``spec`` in a worker: its events as they come, then the outcome.
        Cancelling ``cancel`` stops the run (the worker survives it). ``gone`` says
        whether the asker has left; it is asked once a worker is free, right before the
        question would be sent (the caller's own check runs only once a second)."""
        worker = await self._take_ready()
        if not cancel.cancelled and gone():
            cancel.cancel("the client disconnected")
        if cancel.cancelled:
            # Its client went away while it waited for a worker: nothing is sent.
            await self._release(worker)
            yield RunOutcome(failure=Failure("cancelled", cancel.reason or "cancelled"))
            return
        stdin, stdout = worker.proc.stdin, worker.proc.stdout
        assert stdin is not None and stdout is not None
        config = self._config()
        payload: Mapping[str, Any] = {
            "spec": spec.to_dict(),
            "config": config.to_dict(),
            "config_source": config.source or "",
        }
        cancelled = finished = False
        watcher = asyncio.create_task(cancel.wait())
        reading: asyncio.Future[bytes] | None = None
        stopped_for = 0.0
        try:
            stdin.write(encode(Start(task="ask", payload=payload)))
            while True:
                if reading is None:
                    reading = asyncio.ensure_future(stdout.readline())
                waits: set[asyncio.Future[Any]] = {reading} if cancelled else {reading, watcher}
                done, _ = await asyncio.wait(
                    waits, timeout=_PROBE_EVERY_S, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    stopped_for, ended = await self._probe(worker, stopped_for)
                    if ended is not None:
                        finished = True
                        yield ended
                        return
                    continue
                if watcher.done() and not cancelled:
                    cancelled = True
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        stdin.write(encode(Cancel(reason=cancel.reason or "cancelled")))
                if not reading.done():
                    continue  # only the cancel came: keep reading
                line, reading = await _line_of(worker, reading), None
                if isinstance(line, RunOutcome):  # the worker broke, or ended
                    finished = True
                    yield line
                    return
                frame = _decode(worker, line)
                if isinstance(frame, EventFrame):
                    yield frame
                elif isinstance(frame, ResultFrame):
                    worker.answered += 1
                    finished = True
                    try:
                        outcome = RunOutcome.from_dict(frame.result)
                    except ProtocolError as exc:
                        outcome = _died(f"the ask worker sent a malformed result: {exc}")
                    yield outcome
                    return
        finally:
            watcher.cancel()
            if reading is not None:
                reading.cancel()
            if not finished and worker.alive:
                # Stopped half-way (the daemon is shutting down): its state is unknown.
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
                await worker.proc.wait()
            if not worker.alive:
                self._forget(worker)
            await self._release(worker)

    async def _take_ready(self) -> _Worker:
        """A free worker that answers a ping (waiting for one to be free)."""
        while True:
            worker = await self._take()
            if await self._ready(worker):
                return worker
            # It died before the question was sent (killed, crashed while idle): the
            # question never reached it, so another worker may take it.
            log.warning("ask worker %d is gone; using another", worker.proc.pid)
            await self._release(worker)

    async def _probe(self, worker: _Worker, stopped_for: float) -> tuple[float, RunOutcome | None]:
        """A busy worker sent nothing for a while: how long it has been stopped, and
        the question's outcome once that is too long (the worker is then ended)."""
        stopped_for = stopped_for + _PROBE_EVERY_S if _stopped(worker.proc.pid) else 0
        if stopped_for < STOPPED_LIMIT_S:
            return stopped_for, None
        log.error("ask worker %d stopped for %.0f s: ending it", worker.proc.pid, stopped_for)
        with contextlib.suppress(ProcessLookupError):
            worker.proc.kill()
        await worker.proc.wait()
        return stopped_for, _died(
            f"the ask worker (pid {worker.proc.pid}) was stopped for "
            f"{stopped_for:.0f} s (SIGSTOP or a debugger?) and did not answer; "
            "it was ended and the question was not sent again"
        )

    async def _ready(self, worker: _Worker) -> bool:
        """Does ``worker`` answer a ping? A worker killed while idle may not be reaped
        yet, and must never be handed a question that would then be lost."""
        stdin, stdout = worker.proc.stdin, worker.proc.stdout
        assert stdin is not None and stdout is not None
        ping = Ping()
        try:
            stdin.write(encode(ping))
            async with asyncio.timeout(_READY_TIMEOUT_S):
                while line := await stdout.readline():
                    with contextlib.suppress(FrameError):
                        frame = decode_line(line, _FRAME_LIMIT)
                        if isinstance(frame, Pong) and frame.id == ping.id:
                            return True
        except (ConnectionError, RuntimeError, ValueError, TimeoutError):
            pass
        with contextlib.suppress(ProcessLookupError):
            worker.proc.kill()
        await worker.proc.wait()
        self._forget(worker)
        return False

    def kill_all(self) -> None:
        """Signal handler path: end every worker now."""
        for worker in self._workers:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.send_signal(signal.SIGKILL)


async def _line_of(worker: _Worker, reading: asyncio.Future[bytes]) -> bytes | RunOutcome:
    """The line ``reading`` read, or the outcome of a question whose worker sent an
    oversized line (it is ended) or ended before it answered."""
    try:
        line = reading.result()
    except ValueError:  # a line over the limit: the worker is broken
        worker.proc.kill()
        return _died("the ask worker sent an oversized frame")
    if not line:
        code = await worker.proc.wait()
        how = f"signal {-code}" if code < 0 else f"exit {code}"
        return _died(f"the ask worker ended ({how}) before it answered")
    return line


def _decode(worker: _Worker, line: bytes) -> Frame | None:
    """A worker's line as a frame; its other output (or a bad frame) is logged."""
    try:
        frame = decode_line(line, _FRAME_LIMIT)
    except FrameError as exc:
        log.error("ask worker %d: bad frame: %s", worker.proc.pid, exc)
        return None
    if frame is None:
        log.info("ask worker %d: %s", worker.proc.pid, line.decode(errors="replace").rstrip())
    return frame


def _died(message: str) -> RunOutcome:
    return RunOutcome(failure=Failure("internal", message))
