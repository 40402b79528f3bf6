"""The host side of the persistent REPL (``runners.repl``) that code agents share: one
REPL process per run, started through the code-executor seam (a sandbox container, a
bwrap sandbox or a host process) and removed at the end of the run (``close``), on
cancel, and by the sandbox's orphan sweep. A sandbox's is started at the first cell; a
plain process's (the sandboxed runner's, whose container is the sandbox) while the
model writes the first cell: its start is then not spent inside a cell, where a crash
of the daemon would leave the cell's effect unverified.

Each cell has a timeout on its own running time (time the cell spends waiting for the
host to answer ``llm_query`` is not counted). When it runs out the host sends
``Cancel``: the REPL kills just that cell and goes on with the state from before it.
Only when the REPL does not answer that (or dies) is the session restarted, which
loses earlier variables; the cell's result then says so.

A run resumed after a crash gets a new session too: no earlier cell is run again (a
cell's effects, files written, messages sent, would happen twice). The model is told
so instead (:func:`note_restart`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import JarvisError, ProtocolError
from .._messages import Message, Role
from .._runcontext import RunStopped
from ..executors import Channel, Clock, CodeExecutor, ExecRequest, receive_frame, send_frame
from ..protocol import Cancel, ErrorFrame, Frame, FrameError, Infer, InferResult, ResultFrame, Start

if TYPE_CHECKING:
    from ._dialect import LoopState

__all__ = ["CellResult", "ReplSession", "note_restart", "restart_note"]

log = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parent.parent.parent  # holds jarvisd/ and runners/
#: Sub-calls of one REPL answered at once, and waiting in all: the REPL runs the model's
#: code, so a flood of ``llm_batch`` prompts is refused past the second bound.
MAX_CONCURRENT_SUB_CALLS = 8
MAX_PENDING_SUB_CALLS = 256
#: How long a cancelled cell's REPL has to say the cell is gone before the session is
#: restarted instead.
STOP_GRACE_S = 10.0

#: Answers one ``llm_query`` of a cell: the request's fields in, the answer's text out
#: (a JarvisError becomes the cell's LLMQueryError).
Answer = Callable[[Mapping[str, Any]], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class CellResult:
    """What one cell did. ``error`` is the traceback (or why the cell was stopped),
    ``final`` what it passed to ``FINAL``; ``stopped`` is set when the cell was killed
    before it ended, ``restarted`` when the session was lost with it."""

    stdout: str = ""
    error: str | None = None
    final: str | None = None
    stopped: bool = False
    restarted: bool = False

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> CellResult:
        def text(key: str) -> str | None:
            value = data.get(key)
            return None if value is None else str(value)

        killed, error = text("killed"), text("error")
        if killed and not error:  # it ended itself (os._exit, a crash): not a timeout
            error = (
                f"the cell's process ended before the cell did ({killed}). The session goes "
                "on as it was before this cell."
            )
        return cls(str(data.get("stdout") or ""), error, text("final"), stopped=bool(killed))


class ReplSession:
    """One REPL process for one agent run."""

    def __init__(
        self,
        executor: CodeExecutor,
        *,
        exec_timeout: float,
        session_timeout: float,
        max_output_bytes: int = 10_000,
        variables: Mapping[str, str] | None = None,
        answer: Answer | None = None,
        file_helpers: bool = False,
        cwd: str = "",
    ) -> None:
        self.executor = executor
        #: The directory the session's code starts in ("" : the backend's own).
        self.cwd = cwd
        #: Put view / replace / run (``runners.file_helpers``) in the session's namespace.
        self.file_helpers = file_helpers
        self.exec_timeout = exec_timeout
        self.session_timeout = session_timeout
        self.max_output_bytes = max_output_bytes
        self.variables = dict(variables or {})
        self.answer = answer
        self.channel: Channel | None = None
        #: The process started ahead by ``prepare`` (a plain process only).
        self._opening: asyncio.Future[Channel] | None = None
        self.noise: list[str] = []
        self._write_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_SUB_CALLS)
        #: Sessions lost (and started again) during the run.
        self.restarts = 0

    def _request(self) -> ExecRequest:
        from ..sandbox._policy import CODE_ROOT

        python = "python3" if self.executor.isolated else sys.executable
        root = CODE_ROOT if self.executor.isolated else str(_ROOT)
        # -I: the session's working directory, which its code (and whatever that code
        # left running) can write, is never on its import path; nor are PYTHON*
        # variables or a user site. jarvis's own code is put there by hand.
        boot = f"import sys; sys.path.insert(0, {root!r}); from runners.repl import main; sys.exit(main())"
        return ExecRequest(argv=[python, "-I", "-B", "-c", boot], timeout=self.session_timeout)

    async def prepare(self) -> None:
        """Let the backend get the session's sandbox ready while the model writes the
        first cell (the warm pool: ``sandbox.warm_pool``)."""
        await self.executor.prepare(self._request())
        if not self.executor.isolated and self.channel is None and self._opening is None:
            self._opening = asyncio.ensure_future(self._start())

    async def _open(self) -> Channel:
        opening, self._opening = self._opening, None
        if opening is not None:  # (its channel is set before the REPL has answered)
            return await opening
        if self.channel is not None:
            return self.channel
        return await self._start()

    async def _start(self) -> Channel:
        channel = await self.executor.open(self._request())
        self.channel = channel
        init = Start(
            task="init",
            payload={
                "max_output_bytes": self.max_output_bytes,
                "variables": self.variables,
                "llm": self.answer is not None,
                "file_helpers": self.file_helpers,
                "cwd": self.cwd,
            },
        )
        try:
            await send_frame(channel, init)
            reply = await self._next(channel)
        except BaseException:
            await self.close()
            raise
        if not isinstance(reply, ResultFrame):
            await self.close()
            raise ProtocolError(f"the REPL did not start: {self._why(reply)}")
        return channel

    async def _next(self, channel: Channel) -> Frame | None:
        try:
            return await receive_frame(channel, self.noise)
        except FrameError as exc:
            raise ProtocolError(f"bad frame from the REPL: {exc}") from exc

    def _why(self, frame: Frame | None) -> str:
        if isinstance(frame, ErrorFrame):
            return f"{frame.code}: {frame.message}"
        tail = "\n".join(self.noise[-5:])
        return f"the process ended ({tail or 'no output'})"

    async def close(self) -> None:
        """End the session: the REPL's process (its container) is removed."""
        opening, self._opening = self._opening, None
        if opening is not None:  # started ahead, never used: stopped as it comes
            opening.cancel()
            await asyncio.gather(opening, return_exceptions=True)
        channel, self.channel = self.channel, None
        if channel is not None:
            result = await channel.stop("closed")
            if result.stderr.strip():
                log.debug("repl stderr: %s", result.stderr[-2000:])

    async def _send(self, channel: Channel, frame: Frame) -> None:
        async with self._write_lock:
            await send_frame(channel, frame)

    async def _answer(self, channel: Channel, frame: Infer) -> None:
        try:
            if self.answer is None:
                raise JarvisError("llm_query is not available in this session")
            async with self._slots:
                content = await self.answer(frame.request)
            reply = InferResult(id=frame.id, generation={"content": content})
        except RunStopped:
            raise
        except JarvisError as exc:
            reply = InferResult(id=frame.id, error=str(exc))
        with contextlib.suppress(JarvisError, OSError):
            await self._send(channel, reply)

    async def execute(self, code: str) -> CellResult:
        """Run one cell."""
        channel = await self._open()
        start = Start(task="exec", payload={"code": code})
        await self._send(channel, start)
        tasks: set[asyncio.Task[None]] = set()
        try:
            try:
                return await self._serve_cell(channel, start.id, tasks)
            except TimeoutError:
                return await self._stop_cell(channel, start.id)
        except BaseException:  # the session is lost too (a stalled container engine)
            await self.close()
            raise
        finally:
            for task in tasks:
                task.cancel()
            if tasks:
                results = await asyncio.gather(*tasks, return_exceptions=True)
                for outcome in results:
                    if isinstance(outcome, RunStopped):
                        raise outcome

    async def _serve_cell(
        self, channel: Channel, start_id: str, tasks: set[asyncio.Task[None]]
    ) -> CellResult:
        """Answer the cell's sub-calls until its result comes. The timeout counts the
        cell's own running time: the clock stops while the REPL waits for answers to
        ``llm_query`` / ``llm_batch``, so a slow local model answering them does not
        kill a cell that is doing its job."""
        loop = asyncio.get_running_loop()
        clock, live = Clock(self.exec_timeout), True

        def answered(_: object) -> None:
            clock.release()
            left = clock.remaining()
            if left is not None and live:  # no sub-call out: the cell's clock runs again
                deadline.reschedule(loop.time() + left)

        try:
            async with asyncio.timeout(clock.timeout) as deadline:
                while True:
                    frame = await self._next(channel)
                    for task in [t for t in tasks if t.done()]:
                        tasks.discard(task)
                        task.result()  # a stop signal (budget, cancel) ends the run
                    if isinstance(frame, Infer) and len(tasks) >= MAX_PENDING_SUB_CALLS:
                        refusal = f"more than {MAX_PENDING_SUB_CALLS} sub-calls at once: refused"
                        await self._send(channel, InferResult(id=frame.id, error=refusal))
                    elif isinstance(frame, Infer):
                        clock.hold()  # the cell waits for the host meanwhile
                        deadline.reschedule(None)
                        task = asyncio.ensure_future(self._answer(channel, frame))
                        task.add_done_callback(answered)
                        tasks.add(task)
                    elif isinstance(frame, ResultFrame) and frame.id == start_id:
                        return CellResult.from_wire(frame.result)
                    elif frame is None or isinstance(frame, ErrorFrame):
                        return await self._restart(f"the REPL process died: {self._why(frame)}")
        finally:
            live = False  # the timeout is over: answers that come later leave it alone

    async def _stop_cell(self, channel: Channel, start_id: str) -> CellResult:
        """The cell's time is up: have the REPL kill it, keeping the session."""
        spent = f"execution timed out after {self.exec_timeout:g} s of running time"
        with contextlib.suppress(JarvisError, OSError):
            await self._send(channel, Cancel(reason="timeout"))
        try:
            async with asyncio.timeout(STOP_GRACE_S):
                while True:
                    try:
                        frame = await receive_frame(channel, self.noise)
                    except FrameError:
                        continue  # the killed cell's last frame, cut short
                    if isinstance(frame, ResultFrame) and frame.id == start_id:
                        result = CellResult.from_wire(frame.result)
                        break
                    if isinstance(frame, Infer):  # the cell's last words: nobody waits
                        continue
                    if frame is None or isinstance(frame, ErrorFrame):
                        return await self._restart(f"{spent}; the REPL process died with it")
        except TimeoutError:
            return await self._restart(f"{spent} and the cell could not be stopped alone")
        if not result.stopped:  # it ended just before the cancel came
            return result
        error = (
            f"{spent} and it was stopped. The session goes on as it was before this cell: "
            "variables and imports from earlier cells are kept, this cell's changes to them "
            "are lost (files it wrote stay)."
        )
        return CellResult(result.stdout, error, None, stopped=True)

    async def _restart(self, why: str) -> CellResult:
        await self.close()
        self.restarts += 1
        kept = f" ({', '.join(sorted(self.variables))} are set again)" if self.variables else ""
        error = (
            f"{why}. The session was restarted: variables, imports and files from earlier "
            f"cells are gone{kept}."
        )
        return CellResult(error=error, stopped=True, restarted=True)


def restart_note(kept: Sequence[str] = ()) -> str:
    """What the model is told when its run resumes in a new session after jarvis
    stopped: plainly, what is gone and what is not. ``kept`` names the variables the
    new session sets again (rlm's ``context`` and ``question``)."""
    again = f" ({', '.join(kept)} {'is' if len(kept) == 1 else 'are'} set again)" if kept else ""
    return (
        "[Note: jarvis stopped while this task ran, and the task resumed from its last "
        "checkpoint in a NEW session. Variables, imports and functions from earlier cells "
        f"are gone{again}: define again what you still need. No earlier cell was run "
        "again. Files in the workspace are as the earlier cells left them; files in the "
        "session's /tmp may be gone.]"
    )


def note_restart(state: LoopState, kept: Sequence[str] = ()) -> None:
    """Tell the model in ``state``'s history that its session restarted: on the last
    message when it is the user's (the last cell's output), else as one of its own."""
    note = restart_note(kept)
    messages = state.messages
    if messages and messages[-1].role is Role.USER:
        messages[-1] = Message.user(f"{messages[-1].content}\n\n{note}")
    else:
        messages.append(Message.user(note))
