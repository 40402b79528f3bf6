"""The task worker: one process per running task, driven by jarvisd over frames v1.

A separate process gives each task its own CPU and memory figures (psutil), a process
tree that can be ended as a whole on cancel, and a crash that cannot take the daemon
down. The daemon writes to stdin, reads frames from stdout::

    daemon -> worker   start {task: "agent", payload: {spec, config, resume}}
                       cancel {reason}
                       pong (answers a barrier ping, same id)
                       approval {allowed, reason} (answers an approve, same id)
    worker -> daemon   event {type, data}     every run event, in order
                       event {type: "checkpoint", data: state}  after each model turn
                       ping                   barrier: "have you stored everything so far?"
                       approve {tool, tool_kind, arguments}  an external agent's
                                              permission request under "ask": the task
                                              waits for `jarvis task approve|deny`
                       result {result: RunOutcome}  how the run ended, failures included
                       error {code, message}  only when the start frame was unusable

Before a tool call runs, and after each checkpoint, the worker waits for the daemon to
confirm it stored the events so far (a ping/pong barrier). So a tool can never have an
effect the daemon has no record of, and a resumed task never starts before the state it
resumes from. The barrier has no deadline: a daemon that is stopped (SIGSTOP, a laptop
asleep, a paused VM) is not the task's failure, and the run goes on once it answers
again. When the daemon goes away (stdin closes) the run is cancelled and the worker
exits at once with EXIT_HOST_GONE, so a restarted daemon can never find a task running
twice; the daemon reads that code as "interrupted", never as the run's failure.

A worker leaves through ``os._exit`` (its reader thread is blocked on stdin), which skips
``atexit``: the warm sandbox pools are closed explicitly first (:func:`leave`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any, NoReturn

from jarvisd.protocol import (
    Approval,
    Approve,
    Cancel,
    ChildLink,
    ErrorFrame,
    EventFrame,
    Frame,
    FrameError,
    FrameReader,
    Ping,
    ResultFrame,
    Start,
    jsonable,
)

from .._procs import exit_host_gone
from ._protocol import CHECKPOINT_EVENT

if TYPE_CHECKING:
    from jarvisd._runcontext import CancelToken
    from jarvisd.external import PermissionRequest

log = logging.getLogger("jarvisd.worker")

#: The worker's exit codes (the daemon reads them when no result arrived).
EXIT_OK = 0
EXIT_BAD_START = 64


class _Host:
    """The worker's link to the daemon (a :class:`ChildLink`), with what only a task
    worker needs: the store barrier, approvals, and a cancel that may come first."""

    def __init__(self, out: IO[bytes], reader: FrameReader) -> None:
        self.link = ChildLink(
            reader, out, on_frame=self._on_frame, on_end=self._on_end, on_broken=self.gone
        )
        self._lock = threading.Lock()
        self._on_cancel: Callable[[str], object] | None = None
        #: A cancel that came before the run existed (the daemon cancels as soon as it
        #: likes, often while this process is still importing): delivered at its start.
        self._pending_cancel: str | None = None

    def send(self, frame: Frame) -> None:
        self.link.send(frame)

    def barrier(self) -> None:
        """Block until the daemon has stored every frame sent so far."""
        # No deadline: a stopped daemon answers when it runs again, and a daemon that
        # went away closes stdin, which ends this process (read_forever).
        self.link.exchange(Ping())

    async def approve(self, request: PermissionRequest, cancel: CancelToken) -> bool:
        """Ask the daemon (and through it a person) whether the tool of ``request``
        (a ``jarvisd.external.PermissionRequest``) may run; True allows. The daemon
        answers every approve, with a denial at its timeout; a cancel of the run
        denies at once (the agent is being stopped)."""
        frame = Approve(
            tool=request.tool, tool_kind=request.kind, arguments=jsonable(request.arguments)
        )
        answer, forget = self.link.waiter(frame.id)

        # The first answer counts: the daemon's, or the denial a cancel gives.
        def deny() -> None:
            self.link.resolve(Approval(id=frame.id, reason="cancelled"))

        unregister = cancel.on_cancel(deny)
        try:
            self.send(frame)
            reply = await answer
            return isinstance(reply, Approval) and reply.allowed
        finally:
            unregister()
            forget()

    def on_cancel(self, callback: Callable[[str], object]) -> None:
        """Send cancel reasons to ``callback`` from now on, starting with one that
        arrived before (the run does not exist yet when the daemon may first cancel)."""
        with self._lock:
            self._on_cancel = callback
            pending, self._pending_cancel = self._pending_cancel, None
        if pending is not None:
            callback(pending)

    def _cancel(self, reason: str) -> None:
        with self._lock:
            callback = self._on_cancel
            if callback is None:
                if self._pending_cancel is None:
                    self._pending_cancel = reason
                return
        callback(reason)

    def _on_frame(self, frame: Frame) -> None:
        if isinstance(frame, Cancel):
            self._cancel(frame.reason or "cancelled")
        # else an answer to nothing asked, or a frame a worker does not take: ignored

    def _on_end(self, error: Exception | None) -> None:
        if error is not None:
            log.error("bad frame from the daemon: %s", error)
        self.gone()

    def gone(self) -> NoReturn:
        exit_host_gone()


async def _run(host: _Host, start: Start) -> None:
    from jarvisd._config import parse_config
    from jarvisd._errors import JarvisError
    from jarvisd._events import Event, EventType
    from jarvisd._runcontext import RunContext
    from jarvisd.runs import AgentSpec, run_spec, to_wire

    payload = start.payload
    try:
        spec = AgentSpec.from_dict(payload.get("spec") or {})
        config = parse_config(payload.get("config") or {}, str(payload.get("config_source") or ""))
    except JarvisError as exc:
        code, message = to_wire(exc)
        host.send(ErrorFrame(code=code, message=message))
        host.barrier()
        return
    resume = payload.get("resume")
    loop = asyncio.get_running_loop()

    def on_delta(text: str) -> None:
        host.send(EventFrame(type=EventType.INFERENCE_DELTA.value, data={"text": text}))

    def checkpoint(state: Mapping[str, Any]) -> None:
        host.send(EventFrame(type=CHECKPOINT_EVENT, data=jsonable(state)))
        host.barrier()

    run = RunContext(
        run_id=str(payload.get("task_id") or ""),
        on_delta=on_delta,
        checkpoint=checkpoint,
        resume=resume if isinstance(resume, Mapping) else None,
    )
    run.approver = lambda request: host.approve(request, run.cancel)

    def forward(event: Event) -> None:
        if event.type is EventType.INFERENCE_DELTA:
            return  # deltas arrive through on_delta
        host.send(EventFrame(type=event.type.value, data=jsonable(event.data)))
        if event.type is EventType.TOOL_CALL_START:
            host.barrier()

    run.bus.subscribe(forward)
    host.on_cancel(lambda reason: loop.call_soon_threadsafe(run.cancel.cancel, reason))
    outcome = await run_spec(spec, run, config)
    host.send(ResultFrame(result=jsonable(outcome.to_dict())))
    host.barrier()


def main() -> int:
    # Frames go to a private copy of stdout; anything a library prints goes to stderr,
    # so it can never interleave with a frame.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    logging.basicConfig(
        level=os.environ.get("JARVISD_WORKER_LOG", "WARNING"),
        format="%(asctime)s worker[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    reader = FrameReader(sys.stdin.buffer)
    try:
        start = reader.read()
    except FrameError as exc:
        log.error("bad start frame: %s", exc)
        return EXIT_BAD_START
    if not isinstance(start, Start) or start.task != "agent":
        log.error("expected a start frame for an agent, got %r", start)
        return EXIT_BAD_START
    host = _Host(out, reader)
    host.link.start("jarvisd-host")
    asyncio.run(_run(host, start))
    return EXIT_OK


def leave(code: int) -> NoReturn:
    """Exit without interpreter teardown (a reader thread is blocked on stdin), after
    what ``atexit`` would have done that matters: warm sandbox containers removed."""
    close_warm_pools()
    sys.stderr.flush()
    os._exit(code)


def close_warm_pools() -> None:
    """Remove this process's warm sandbox containers, if it made any (the pool module
    is imported only by a run that used a sandbox)."""
    pool = sys.modules.get("jarvisd.sandbox._pool")
    if pool is None:
        return
    try:
        pool.close_pools()
    except Exception:  # leaving must not fail; the daemon's sweep removes what is left
        log.exception("closing the warm sandbox pool failed")


if __name__ == "__main__":
    leave(main())
