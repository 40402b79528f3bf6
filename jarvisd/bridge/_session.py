"""The host side of a frame conversation with a program across a process boundary.

The program (the in-container agent runner today; external agents such as the Node.js
bridge next) is started by a code executor and speaks frame protocol v1 on its stdin
and stdout. The host sends ``start``; the program asks for generations with ``infer``
frames, which the host serves with the run's engine (through ``RunEngine``: the run's
budget, cancel token and inference events stay on the host), concurrently, with the
program's clock held meanwhile; the program's ``event`` frames are published on the
run's bus; it ends with one ``result`` or ``error`` frame. Cancelling the run kills the
program. What the final frame means is the caller's business: see :class:`Outcome`.

The program is hostile, so the host bounds what it may cost: at most
``max_concurrent`` inferences in flight (past that the host stops reading its frames
until one ends), each asking at most ``max_tokens`` new tokens, all of them within the
session's own ``budget`` (calls, tokens) as well as the run's; its events are vetted
(:func:`~jarvisd.bridge._events.vet_event`) and its other output kept in bounded noise.
The host tools it was offered (``tools``) it calls with ``tool`` frames, served by
:class:`~jarvisd.bridge._tools.HostTools` on the same terms: a few at a time, with
backpressure, each counted on the ledgers, none started once the run has stopped.

Frames are handled in the order they come, so a ``pong`` tells the program that every
frame before its ``ping`` was handled: its events published (the daemon's worker stores
a ``tool_call_start`` before it returns) and its ``checkpoint`` recorded through
``on_checkpoint``. A program that must not act before the host has a record of it
(run a cell, a tool) pings and waits for the pong first.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import JarvisError, ProtocolError, SandboxError
from .._messages import SamplingOptions, ToolResult, Usage
from .._runcontext import Budget, Hold, RunContext, RunStopped
from ..engines import Engine, RunEngine
from ..executors import Channel, ExecResult, receive_frame, send_frame
from ..protocol import (
    Checkpoint,
    ErrorFrame,
    EventFrame,
    FrameError,
    Infer,
    InferRequest,
    InferResult,
    Log,
    Ping,
    Pong,
    ResultFrame,
    Start,
    ToolFrame,
    ToolResultFrame,
)
from ..tools import BaseTool
from ._events import vet_event
from ._tools import HostTools

__all__ = ["FrameSession", "Outcome", "runner_result", "wire_tool_results"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Outcome:
    """How the conversation ended: the program's final frame (None when it ended
    without one), how the process ended, and the run stop (budget spent) that ended it,
    if one did. Lines the program printed outside frames are in ``noise``."""

    final: ResultFrame | ErrorFrame | None
    process: ExecResult
    stopped: RunStopped | None = None
    noise: list[str] = field(default_factory=list)


#: How much of a runner's error (its message, its stderr's last lines) an error keeps.
_RUNNER_ERROR_CHARS = 2000


def runner_result(outcome: Outcome, run: RunContext, agent: str, program: str) -> Mapping[str, Any]:
    """The ``result`` frame's payload of the program that runs ``agent`` (``program``
    names it in errors: "the openhands runner"), or the error that stands for how it
    ended instead: the run stop that ended it, the run's cancel, its error frame, or no
    result at all (with the last lines of its stderr)."""
    if outcome.stopped is not None:
        raise outcome.stopped
    if run.cancel.cancelled:
        raise run.cancel.error()  # BudgetExceeded when a budget stopped it
    final = outcome.final
    if isinstance(final, ErrorFrame):
        raise JarvisError(f"{agent} failed: {final.message[:_RUNNER_ERROR_CHARS]}")
    if not isinstance(final, ResultFrame):
        tail = " | ".join(outcome.process.stderr.strip().splitlines()[-3:])
        raise JarvisError(
            f"{program} ended without a result (exit {outcome.process.exit_code})"
            + (f": {tail[:_RUNNER_ERROR_CHARS]}" if tail else "")
        )
    return final.result


async def run_runner(
    channel: Channel,
    engine: Engine,
    run: RunContext,
    start: Start,
    *,
    name: str,
    model: str,
    max_tokens: int,
) -> Mapping[str, Any]:
    """Serve the runner on ``channel`` (``name``: "openhands runner") through one frame
    session started with ``start``; its result payload, as :func:`runner_result` reads
    it for agent ``start.task``."""
    session = FrameSession(channel, engine, run, model=model, max_tokens=max_tokens, name=name)
    return runner_result(await session.run(start), run, start.task, f"the {name}")


def wire_tool_results(data: Mapping[str, Any]) -> list[ToolResult]:
    """The ``tool_results`` a runner reported, each field bounded (it is hostile)."""
    return [
        ToolResult(
            str(item.get("tool_name", ""))[:200],
            str(item.get("content", ""))[:4000],
            bool(item.get("success", True)),
            str(item.get("call_id", ""))[:200] or None,
        )
        for item in data.get("tool_results") or ()
        if isinstance(item, dict)
    ]


#: What a program's ``log`` frame may put in the host's log, in characters.
_LOG_CHARS = 2000
#: Inferences one program may have in flight when the caller does not say.
MAX_CONCURRENT_INFER = 4
#: Host tool calls one program may have in flight.
MAX_CONCURRENT_TOOLS = 4


class FrameSession:
    """One conversation over ``channel``. ``model`` is the host's choice and stands
    whatever an ``infer`` request asks; ``max_tokens`` caps what one request may ask
    for; ``budget`` is the program's own ledger (None: only the run's applies);
    ``event_tags`` are added to every event the program publishes (e.g.
    ``{"sandboxed": True}``); ``tools`` are the host tools the program may call (its
    start payload should offer them: :meth:`HostTools.offered` via ``self.tools``);
    ``on_checkpoint`` records the program's ``checkpoint`` frames (None: dropped)."""

    def __init__(
        self,
        channel: Channel,
        engine: Engine,
        run: RunContext,
        *,
        model: str = "",
        max_tokens: int | None = None,
        budget: Budget | None = None,
        max_concurrent: int = MAX_CONCURRENT_INFER,
        event_tags: Mapping[str, object] | None = None,
        name: str = "program",
        tools: Sequence[BaseTool] = (),
        max_concurrent_tools: int = MAX_CONCURRENT_TOOLS,
        on_checkpoint: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.channel = channel
        self.engine = RunEngine.bind(engine, run)
        self.run_ctx = run
        self.model = model
        self.max_tokens = max_tokens
        self.budget = budget
        self.event_tags = dict(event_tags or {})
        self.name = name
        self.stopped: RunStopped | None = None
        self.noise: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(max(1, max_concurrent))
        self.tools = HostTools(tools, run, budget=budget)
        self._tool_slots = asyncio.Semaphore(max(1, max_concurrent_tools))
        self.on_checkpoint = on_checkpoint
        #: Inference calls answered, and checkpoints recorded: a program records at most
        #: one checkpoint per answered call (and one more), so a flood of them cannot
        #: make the host rewrite its store without end (each is up to a frame's size).
        self.answered = 0
        self.checkpoints = 0

    async def run(self, start: Start) -> Outcome:
        """Send ``start``, serve the program until it ends, and say how it ended.
        Raises ProtocolError when the program breaks the frame protocol."""
        loop = asyncio.get_running_loop()

        def on_cancel() -> None:
            loop.call_soon_threadsafe(self._kill_soon, "cancelled")

        kill_on_cancel = self.run_ctx.cancel.on_cancel(on_cancel)
        final: ResultFrame | ErrorFrame | None = None
        try:
            await send_frame(self.channel, start)
            final = await self._loop()
        except FrameError as exc:
            # A program killed because the run stopped, or by its timeout, may leave half
            # a frame behind: how it ended is the failure, not the frame it was writing.
            ended_by_host = bool(
                self.run_ctx.cancel.cancelled or self.stopped is not None or self.channel.reason
            )
            if not ended_by_host:
                raise ProtocolError(f"the {self.name} broke the frame protocol: {exc}") from exc
        except SandboxError:
            if not self.run_ctx.cancel.cancelled and self.stopped is None:
                raise
        finally:
            kill_on_cancel()
            for task in self._tasks:
                task.cancel()
            process = await self._end(final)
        return Outcome(final, process, self.stopped, self.noise)

    async def _end(self, final: ResultFrame | ErrorFrame | None) -> ExecResult:
        """Let the program end when it said its last word, else kill it; reaped either
        way, also when this run is cancelled meanwhile."""
        try:
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if final is not None:
                await self.channel.close_stdin()
                return await self.channel.wait()
        except BaseException:
            await self.channel.stop("cancelled")
            raise
        return await self.channel.stop("cancelled" if self.run_ctx.cancel.cancelled else "killed")

    def _kill_soon(self, reason: str) -> None:
        self._track(self.channel.kill(reason))

    def _track(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _loop(self) -> ResultFrame | ErrorFrame | None:
        while True:
            frame = await receive_frame(self.channel, self.noise)
            if frame is None:
                return None
            if isinstance(frame, Infer):
                # Backpressure: with every slot taken, no more frames are read, so a
                # flood of requests waits in the program, not in the host's memory.
                await self._slots.acquire()
                self._track(self._serve(frame))
            elif isinstance(frame, ToolFrame):
                if self.stopped is not None or self.run_ctx.cancel.cancelled:
                    continue  # the run is over: nothing more starts, nobody is answered
                await self._tool_slots.acquire()
                self._track(self._serve_tool(frame))
            elif isinstance(frame, EventFrame):
                self._publish(frame)
            elif isinstance(frame, Checkpoint):
                self._checkpoint(frame)
            elif isinstance(frame, ResultFrame | ErrorFrame):
                return frame
            elif isinstance(frame, Ping):
                await send_frame(self.channel, Pong(id=frame.id))
            elif isinstance(frame, Log):
                # Cut, and shown as a literal: it goes to the host's log (a file, for the
                # daemon), where neither a flood nor escape sequences belong.
                log.info("%s: %r", self.name, frame.message[:_LOG_CHARS])

    def _checkpoint(self, frame: Checkpoint) -> None:
        if self.on_checkpoint is None or self.stopped is not None:
            return
        if self.checkpoints > self.answered:
            log.debug("%s: a checkpoint with no inference since the last one: dropped", self.name)
            return
        self.checkpoints += 1
        self.on_checkpoint(frame.state)

    def _publish(self, frame: EventFrame) -> None:
        event = vet_event(frame, self.run_ctx.depth, self.event_tags)
        if event is None:
            log.debug("%s may not publish event type %r: dropped", self.name, frame.type[:64])
            return
        # The keys are the vetted fields and the host's own: none comes from the program.
        self.run_ctx.bus.publish(event.type, **event.data)

    def _options(self, request: InferRequest) -> tuple[SamplingOptions, Hold | None]:
        """The request's sampling options, its ``max_tokens`` clamped to the session's
        cap and to what its own budget has left, and the hold in that budget (settled
        when the call ends; the run's own ledger is held by RunEngine)."""
        wanted = request.options.max_tokens
        allowed = max(1, wanted if self.max_tokens is None else min(wanted, self.max_tokens))
        hold = None
        if self.budget is not None:
            hold = self.budget.reserve(0, allowed)
            allowed = hold.completion_tokens
        if allowed == wanted:
            return request.options, hold
        return dataclasses.replace(request.options, max_tokens=allowed), hold

    async def _serve(self, frame: Infer) -> None:
        hold: Hold | None = None
        started = False
        try:
            request = InferRequest.from_dict(frame.request)
            options, hold = self._options(request)
            started = True
            # The program only waits meanwhile, so its clock is held: a slow local model
            # must not get it killed. The run's budget and time limit still bound it,
            # and so does the clock's own cap on held time.
            with self.channel.clock_held():
                generation = await self.engine.generate(
                    request.messages,
                    model=self.model,
                    tools=request.tools,
                    options=options,
                )
            if hold is not None:
                hold.settle(generation.usage)
            reply = InferResult(id=frame.id, generation=generation.to_dict())
            self.answered += 1
        except RunStopped as exc:
            # The program's turns: the calls answered, and this one if it had started
            # (a run stopped mid-reply said 0 turns after 600 s of replies).
            exc.turns = self.answered + started
            self.stopped = exc
            await self.channel.kill("cancelled")
            return
        except JarvisError as exc:
            reply = InferResult(id=frame.id, error=f"{type(exc).__name__}: {exc}")
        except ValueError as exc:  # a malformed request (FrameError) or reply
            reply = InferResult(id=frame.id, error=str(exc))
        except Exception as exc:
            # A fault of the engine's or ours. Answered all the same: unanswered, the
            # program would wait on this call until its run timed out.
            log.exception("an inference for the sandboxed program failed")
            reply = InferResult(id=frame.id, error=f"internal error: {type(exc).__name__}")
        finally:
            self._slots.release()
            if hold is not None and hold.open:
                # A failed call still counts against the program's own cap (the run's
                # ledger, in RunEngine, charged its tokens): failing calls are not free.
                hold.settle(Usage())
        with contextlib.suppress(SandboxError):
            await send_frame(self.channel, reply)

    async def _serve_tool(self, frame: ToolFrame) -> None:
        try:
            # The program waits meanwhile: its clock is held, as for inference.
            with self.channel.clock_held():
                reply: ToolResultFrame = await self.tools.call(frame)
        except RunStopped as exc:
            exc.turns = self.answered
            self.stopped = exc
            await self.channel.kill("cancelled")
            return
        finally:
            self._tool_slots.release()
        with contextlib.suppress(SandboxError):
            await send_frame(self.channel, reply)
