"""The in-container agent runner: ``python3 -m runners.sandbox_runner``.

Standard library only (it runs in the bare python3 sandbox image, with jarvis's own
packages mounted read-only on PYTHONPATH). It speaks frame protocol v1
(``jarvisd.protocol``) on its stdin and stdout:

Started as ``python3 -I -S -B -c "import sys; sys.path.insert(0, '/opt/jarvis'); ..."``
(``jarvisd.sandbox.RUNNER_ARGV``): isolated, so that no directory a sandboxed user can
write (the working directory, ``PYTHON*`` variables, a user site) is ever on its
import path.

1. The host sends ``start`` with ``task="agent"`` and the payload::

       {"spec": AgentSpec.to_dict() (sandbox false), "config": Config.to_dict(),
        "context": {"conversation": [Message...], "metadata": {...}} | null,
        "depth": int, "run_id": str, "host_tools": [OfferedTool.to_dict()...],
        "checkpoints": bool, "resume": state | null}

   Secrets, if any, travel only here: never in argv or the environment.
   ``host_tools`` are the run's MCP tools: their servers run on the host's side (in a
   sandbox of their own), so here each is a ``runners.host_tools.HostTool`` whose calls
   are ``tool`` frames, answered with ``tool_result`` (same id).
2. The runner builds the agent with a :class:`ProxyEngine`: each generation is an
   ``infer`` frame (``request`` = ``jarvisd.protocol.InferRequest``) answered by the host with
   ``infer_result`` (same id). The host calls its real engine under the run's budget
   and cancel token; several ``infer`` frames may be in flight at once.
3. The agent's events go to the host as ``event`` frames (inference events excepted:
   the host publishes those itself); ``cancel`` from the host cancels the run.
   With ``checkpoints`` true (a daemon task), the loop's state goes to the host as a
   ``checkpoint`` frame after each completed turn, and after it, as after each
   ``tool_call_start``, the runner pings the host and waits for its ``pong``: the host
   has recorded what came before, so no cell or tool call runs unrecorded. ``resume``
   is such a state: the run continues from it (in a new session: nothing is replayed).
4. The runner ends with one ``result`` frame (``RunOutcome.to_dict()``: the answer, or
   the run's failure with its code) or, when it could not run at all, one ``error``
   frame (a code from the one table, ``jarvisd.runs._failures``).

Anything else the agent prints goes to stderr: file descriptor 1 carries frames only.

Before anything else the runner separates itself from the code it will run for the model
(``jarvisd.executors._privsep``): started as root inside the container (the docker
backend does so for this runner only), it leaves root to a launcher parent, becomes the
sandbox user for good (no saved root uid) and has model-written code started as a
second user by the launcher; in every case it is not dumpable, so that code cannot
open ``/proc/<runner>/fd`` and write frames of its own on the runner's stdout.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from jarvisd._errors import EngineError, JarvisError, ProtocolError
from jarvisd._events import Event, EventType
from jarvisd._messages import Generation, Message, SamplingOptions, ToolSpec
from jarvisd._runcontext import RunContext, RunStopped
from jarvisd.engines._base import DEFAULT_OPTIONS, Engine
from jarvisd.executors._launcher import drop_privileges
from jarvisd.executors._privsep import PrivsepError
from jarvisd.protocol import (
    Cancel,
    Checkpoint,
    ChildLink,
    ErrorFrame,
    EventFrame,
    Frame,
    FrameError,
    Infer,
    InferRequest,
    InferResult,
    OfferedTool,
    Ping,
    ResultFrame,
    Start,
    ToolFrame,
    jsonable,
)
from jarvisd.runs._failures import to_wire

if TYPE_CHECKING:
    from jarvisd._config import Config
    from jarvisd.executors._launcher import Launcher
    from jarvisd.runs import AgentSpec
    from jarvisd.tools import BaseTool

__all__ = [
    "FrameLink",
    "ProxyEngine",
    "entry",
    "main",
]

_HOST_EVENTS = {EventType.INFERENCE_START, EventType.INFERENCE_END, EventType.INFERENCE_DELTA}


class FrameLink:
    """The runner's link to the host (a :class:`ChildLink`): the host's ``cancel``, or
    its going away, cancels the run."""

    def __init__(self, inp: IO[bytes], out: IO[bytes]) -> None:
        self.link = ChildLink(inp, out, on_frame=self._on_frame, on_end=self._on_end)
        self.reader = self.link.reader
        self.run: RunContext | None = None
        self.closed = False
        self._reason = "the host closed the channel"

    def send(self, frame: Frame) -> None:
        self.link.send(frame)

    def start(self, run: RunContext) -> None:
        """Read the host's frames from now on; ``run`` is what its cancel stops."""
        self.run = run
        self.link.start("frames-in")

    def _on_frame(self, frame: Frame) -> bool:
        if isinstance(frame, Cancel):
            self._reason = frame.reason or "cancelled by the host"
            return False  # nothing more to read: the run stops
        return True  # an answer nobody waits for (its call timed out): dropped

    def _on_end(self, error: Exception | None) -> None:
        reason = self._reason if error is None else f"bad input from the host: {error}"
        self.closed = True
        if self.run is not None:
            self.run.cancel.cancel(reason)

    def barrier(self) -> None:
        """Block until the host has handled every frame sent so far (it answers pings
        in order). No deadline: a host that went away ends the stream, which cancels
        the run, and its container is removed."""
        self.link.exchange(Ping())

    def checkpoint(self, state: Mapping[str, Any]) -> None:
        """Send the loop's state to the host, and wait until it is recorded."""
        self.send(Checkpoint(state=jsonable(dict(state))))
        self.barrier()

    async def call(self, frame: Infer | ToolFrame) -> Frame:
        """Send ``frame`` and wait for the host's answer (same id)."""
        return await self.link.call(frame)


class ProxyEngine(Engine):
    """An engine whose generations happen on the host, over the frame link."""

    name = "proxy"

    def __init__(self, link: FrameLink) -> None:
        self.link = link

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        request = InferRequest(tuple(messages), model, tuple(tools), options)
        reply = await self.link.call(Infer(request=request.to_dict()))
        if not isinstance(reply, InferResult):
            raise EngineError(f"the host answered an infer frame with {reply.kind!r}")
        if reply.error is not None or reply.generation is None:
            raise EngineError(reply.error or "the host sent no generation")
        return Generation.from_dict(reply.generation)


def _forward_events(link: FrameLink, event: Event, recorded: bool = False) -> None:
    if event.type in _HOST_EVENTS:
        return
    link.send(EventFrame(type=event.type.value, data=jsonable(dict(event.data))))
    if recorded and event.type is EventType.TOOL_CALL_START:
        link.barrier()  # the host has it on record before the call runs


def _in_container_extra(
    spec: AgentSpec, config: Config, launcher: Launcher | None = None
) -> dict[str, Any]:
    """What agents that run code need in here: left to the runtime they would get the
    host's configured backend (a container engine), which does not exist inside the
    container. Their code runs as a plain process here (the container is the sandbox),
    started by ``launcher`` as the code user when the runner is separated, and has no
    network."""
    from jarvisd.agents import AgentRegistry
    from jarvisd.executors import SubprocessExecutor

    extra: dict[str, Any] = {}
    agent_cls = AgentRegistry.get(spec.agent or config.agent.default)
    if agent_cls.runs_code:
        extra["executor"] = SubprocessExecutor(launcher=launcher)
    if agent_cls.fetches_urls:
        extra["allow_network"] = False
    return extra


async def run_agent_task(start: Start, link: FrameLink, launcher: Launcher | None = None) -> Frame:
    from jarvisd._config import parse_config
    from jarvisd.agents import AgentContext
    from jarvisd.runs import AgentSpec, run_spec

    payload = start.payload
    spec = AgentSpec.from_dict({**dict(payload.get("spec") or {}), "sandbox": False})
    config = parse_config(payload.get("config") or {}, "<host config>")
    # Inside the container the code executor is a plain process: the container is
    # the sandbox (there is no engine in here to start another one).
    config = dataclasses.replace(
        config, sandbox=dataclasses.replace(config.sandbox, backend="none")
    )
    context = None
    raw_context = payload.get("context")
    if isinstance(raw_context, Mapping):
        context = AgentContext(
            conversation=[Message.from_dict(m) for m in raw_context.get("conversation") or ()],
            metadata=dict(raw_context.get("metadata") or {}),
        )
    host_tools: list[BaseTool] = []
    if payload.get("host_tools"):
        # Imported only when offered: the tools package is start-up time in every run.
        from runners.host_tools import HostTool

        host_tools = [HostTool(link, OfferedTool.from_dict(t)) for t in payload["host_tools"]]
    recorded = payload.get("checkpoints") is True
    resume = payload.get("resume")
    run = RunContext(
        run_id=str(payload.get("run_id") or ""),
        depth=int(payload.get("depth") or 0),
        checkpoint=link.checkpoint if recorded else None,
        resume=resume if isinstance(resume, Mapping) else None,
    )
    run.bus.subscribe(lambda event: _forward_events(link, event, recorded))
    link.start(run)
    outcome = await run_spec(
        spec,
        run,
        config,
        ProxyEngine(link),
        context=context,
        extra=_in_container_extra(spec, config, launcher),
        trace=False,
        tools=host_tools,
    )
    return ResultFrame(result=jsonable(outcome.to_dict()))


def main() -> int:
    try:
        launcher = drop_privileges()
    except (PrivsepError, OSError) as exc:
        # Nothing has run yet: say why on stderr and stop, never run unseparated as root.
        print(f"sandbox runner: cannot drop privileges: {exc}", file=sys.stderr)
        return 2
    # fd 1 carries frames only: whatever else writes to it (print, a child process)
    # goes to stderr instead.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    link = FrameLink(sys.stdin.buffer, out)
    try:
        start = link.reader.read()
    except FrameError as exc:
        link.send(ErrorFrame(code="protocol", message=str(exc)))
        return 2
    if not isinstance(start, Start):
        link.send(ErrorFrame(code="protocol", message="expected a start frame first"))
        return 2
    try:
        if start.task != "agent":
            raise ProtocolError(f"unknown task {start.task!r} (this runner runs: agent)")
        reply = asyncio.run(run_agent_task(start, link, launcher))
    except (JarvisError, RunStopped) as exc:
        code, message = to_wire(exc)
        reply = ErrorFrame(code=code, message=message)
    except Exception as exc:
        traceback.print_exc()
        code, message = to_wire(exc)
        reply = ErrorFrame(code=code, message=message)
    link.send(reply)
    return 0 if isinstance(reply, ResultFrame) else 1


def entry() -> None:
    """Run :func:`main` and leave at once."""
    code = main()
    # Skip interpreter teardown: the frame reader thread may sit in a read on stdin,
    # and closing stdin at shutdown would wait a second for its lock.
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
