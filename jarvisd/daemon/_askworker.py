"""The ask worker: a long-lived process that answers jarvisd's ``ask`` requests, one at
a time, so that a loaded model, a crashing engine or a runaway sandboxed run lives
outside the daemon. Spoken over frames v1 on stdin/stdout::

    daemon -> worker   ping                    before each question: answered with pong
                       start {task: "ask", payload: {spec, config, config_source}}
                       cancel {reason}         stops the question being answered (if any)
    worker -> daemon   event {type, data}      streamed text (inference_delta) and tool
                                               calls (tool_call_start / tool_call_end)
                       result {result: RunOutcome}   then the worker waits for the next

Engines stay warm between questions (a llama.cpp model stays loaded). A worker whose
engines have been idle for ``idle_unload`` seconds exits, which gives their memory
back; the daemon starts a fresh one when it needs one. When the daemon goes away
(stdin closes) the worker and what its question started end at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, NoReturn

from jarvisd.protocol import (
    Cancel,
    ChildLink,
    EventFrame,
    Frame,
    FrameReader,
    ResultFrame,
    Start,
    jsonable,
)

from .._procs import exit_host_gone

if TYPE_CHECKING:
    from jarvisd._config import Config
    from jarvisd._events import Event
    from jarvisd._runcontext import RunContext
    from jarvisd.engines import Engine
    from jarvisd.runs import AgentSpec

log = logging.getLogger("jarvisd.askworker")

EXIT_IDLE = 0
#: Events a question's caller sees besides its text (the rest stay in the trace).
_FORWARDED = ("tool_call_start", "tool_call_end")


class AskWorker:
    def __init__(self, out: IO[bytes], reader: FrameReader, idle_unload: float) -> None:
        # Pings ("are you there?" before a question) are answered by the link itself.
        self.link = ChildLink(
            reader, out, on_frame=self._on_frame, on_end=self._on_end, on_broken=self.gone
        )
        self.idle_unload = idle_unload
        self.engines: dict[str, Engine] = {}
        self.current: RunContext | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._starts: asyncio.Queue[Start] = asyncio.Queue()

    def send(self, frame: Frame) -> None:
        self.link.send(frame)

    def _on_frame(self, frame: Frame) -> None:
        """On the reader thread: starts go to the loop, a cancel to the current question."""
        assert self._loop is not None
        if isinstance(frame, Start):
            self._loop.call_soon_threadsafe(self._starts.put_nowait, frame)
        elif isinstance(frame, Cancel):
            self._loop.call_soon_threadsafe(self._cancel, frame.reason or "cancelled")

    def _on_end(self, error: Exception | None) -> None:
        if error is not None:
            log.error("bad frame from the daemon: %s", error)
        self.gone()

    def gone(self) -> NoReturn:
        """The daemon went away (stdin closed): nobody can receive an answer."""
        exit_host_gone()

    def _cancel(self, reason: str) -> None:
        if self.current is not None:  # a cancel that arrives between questions is stale
            self.current.cancel.cancel(reason)

    async def serve(self) -> int:
        self._loop = asyncio.get_running_loop()
        self.link.start("jarvisd-host")
        while True:
            timeout = self.idle_unload if self.engines else None
            try:
                start = await asyncio.wait_for(self._starts.get(), timeout)
            except TimeoutError:
                log.info("idle for %.0f s with engines loaded: exiting to free them", timeout)
                return EXIT_IDLE
            await self.answer(start.payload)

    def engine_for(self, spec: AgentSpec, config: Config) -> Engine:
        from jarvisd.engines import engine_for_agent, select_engine

        explicit = engine_for_agent(config, spec.engine, spec.agent or config.agent.default)
        settings = config.to_dict()
        key = json.dumps(
            [explicit, spec.model, dict(spec.env), settings["engine"], settings["credentials"]],
            sort_keys=True,
        )
        engine = self.engines.get(key)
        if engine is None:
            engine = self.engines[key] = select_engine(config, explicit, spec.model, spec.env)
        return engine

    async def answer(self, payload: Mapping[str, Any]) -> None:
        from jarvisd._config import parse_config
        from jarvisd._errors import JarvisError
        from jarvisd._runcontext import RunContext
        from jarvisd.runs import AgentSpec, Failure, RunOutcome, run_spec

        def on_delta(text: str) -> None:
            self.send(EventFrame(type="inference_delta", data={"text": text}))

        def forward(event: Event) -> None:
            if event.type.value in _FORWARDED:
                self.send(EventFrame(type=event.type.value, data=jsonable(event.data)))

        run = RunContext(on_delta=on_delta)
        run.bus.subscribe(forward)
        self.current = run
        try:
            spec = AgentSpec.from_dict(payload.get("spec") or {})
            config = parse_config(
                payload.get("config") or {}, str(payload.get("config_source") or "")
            )
            engine = self.engine_for(spec, config)
            outcome = await run_spec(spec, run, config, engine)
        except JarvisError as exc:
            outcome = RunOutcome(failure=Failure.of(exc))
        finally:
            self.current = None
        self.send(ResultFrame(result=jsonable(outcome.to_dict())))


def main() -> int:
    # Frames go to a private copy of stdout; whatever a library prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    logging.basicConfig(
        level=os.environ.get("JARVISD_WORKER_LOG", "WARNING"),
        format="%(asctime)s askworker[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    idle = float(sys.argv[1]) if len(sys.argv) > 1 else 300.0
    # Imported before the first question, while the worker waits: its first answer
    # then costs no more than a warm one.
    import jarvisd.agents
    import jarvisd.runs._execute  # noqa: F401

    worker = AskWorker(out, FrameReader(sys.stdin.buffer), idle)
    return asyncio.run(worker.serve())


if __name__ == "__main__":
    from ._worker import leave

    # The reader thread sits in a read on stdin: no interpreter teardown, but the warm
    # sandbox containers are removed (an idle unload must not leave them).
    leave(main())
