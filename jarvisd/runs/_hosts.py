"""The Host seam: where a run happens. One required method, ``run(spec, run)``.

The CLI picks a host as httpx picks a transport: :class:`DaemonHost` when jarvisd
answers, else :class:`LocalHost`. Both return the same :class:`RunOutcome` for the same
spec; the caller's :class:`RunContext` receives the streamed answer (``on_delta``) and
the tool-call events on its bus either way. Tests use ``jarvisd.testing.FakeHost``.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import signal
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import DaemonError, DaemonUnavailable, JarvisError
from .._events import Event, EventType
from .._run import RunContext
from ._outcome import Failure, RunOutcome
from ._spec import AgentSpec

if TYPE_CHECKING:
    from .._config import Config
    from ..engines import Engine

__all__ = ["INTERRUPTED", "DaemonHost", "Host", "LocalHost"]

INTERRUPTED = "interrupted by the user"
#: Run events a daemon forwards to the caller (the rest stay in its trace).
FORWARDED_EVENTS = frozenset({EventType.TOOL_CALL_START, EventType.TOOL_CALL_END})


class Host(abc.ABC):
    """Runs a spec somewhere and reports how it ended."""

    @abc.abstractmethod
    def run(self, spec: AgentSpec, run: RunContext) -> RunOutcome:
        """Run ``spec`` to its outcome (blocking). Streamed text goes to
        ``run.on_delta``, tool-call events to ``run.bus``; Ctrl-C stops the run and
        returns a ``cancelled`` outcome."""


class LocalHost(Host):
    """Runs in this process. ``config`` defaults to the config file, read per run."""

    def __init__(self, config: Config | None = None, engine: Engine | None = None) -> None:
        self.config = config
        self.engine = engine

    def run(self, spec: AgentSpec, run: RunContext) -> RunOutcome:
        from .._config import load_config

        config = self.config or load_config()
        return asyncio.run(self._run(spec, run, config))

    async def _run(self, spec: AgentSpec, run: RunContext, config: Config) -> RunOutcome:
        from ._execute import run_spec

        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def interrupt() -> None:
            # The first Ctrl-C stops the run at its next safe point (tool calls get
            # their results, containers go); a second one stops it at once.
            if run.cancel.cancelled and task is not None:
                task.cancel()
            run.cancel.cancel(INTERRUPTED)

        handled = threading.current_thread() is threading.main_thread()
        if handled:
            loop.add_signal_handler(signal.SIGINT, interrupt)
        try:
            return await run_spec(spec, run, config, self.engine)
        except asyncio.CancelledError:
            return RunOutcome(agent=spec.agent, failure=Failure("cancelled", INTERRUPTED))
        finally:
            if handled:
                loop.remove_signal_handler(signal.SIGINT)


class DaemonHost(Host):
    """Runs in jarvisd, in a worker process of its own. Raises ``DaemonUnavailable``
    only when no daemon could be reached, before the question was sent: then running
    it elsewhere is safe. Once sent, a lost daemon is a failure, never a re-run."""

    def __init__(
        self,
        socket: Path | None = None,
        *,
        connect_timeout: float = 0.5,
        keepalive: float = 5.0,
    ) -> None:
        self.socket = socket
        self.connect_timeout = connect_timeout
        self.keepalive = keepalive

    def run(self, spec: AgentSpec, run: RunContext) -> RunOutcome:
        from .._paths import paths

        socket = self.socket or paths().socket
        if not os.path.lexists(socket):  # the usual case with no daemon: say so cheaply
            raise DaemonUnavailable(f"no jarvisd answers on {socket}")

        from ..daemon._client import Client
        from ..daemon._protocol import Delta, EventReply, ResultReply

        client = Client(socket, connect_timeout=self.connect_timeout)
        ask_id = "ask-" + uuid.uuid4().hex
        interrupted = False

        def interrupt(signum: int, frame: object) -> None:
            # The first Ctrl-C stops the run where it runs, and its outcome still comes
            # back on the connection (the read simply goes on); a second one leaves.
            nonlocal interrupted
            if interrupted:
                raise KeyboardInterrupt
            interrupted = True
            with contextlib.suppress(JarvisError):
                client.cancel_ask(ask_id, INTERRUPTED)

        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, interrupt)
        replies = client.ask(spec.at_edge(), keepalive=self.keepalive, ask_id=ask_id)
        try:
            for reply in replies:
                if isinstance(reply, Delta):
                    if run.on_delta is not None:
                        run.on_delta(reply.text)
                elif isinstance(reply, EventReply):
                    _forward(run, reply.event, reply.data, reply.timestamp)
                elif isinstance(reply, ResultReply):
                    return RunOutcome.from_dict(reply.result)
        except KeyboardInterrupt:  # closing the connection cancels the run, too
            return RunOutcome(agent=spec.agent, failure=Failure("cancelled", INTERRUPTED))
        finally:
            replies.close()
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        raise DaemonError("jarvisd ended the answer without a result")


def _forward(run: RunContext, name: str, data: object, timestamp: float) -> None:
    with contextlib.suppress(ValueError):
        kind = EventType(name)
        if kind in FORWARDED_EVENTS and isinstance(data, dict):
            run.bus.deliver(Event(kind, data, timestamp))
