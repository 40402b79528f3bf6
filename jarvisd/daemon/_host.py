"""DaemonHost: the Host that runs a spec in jarvisd (see ``jarvisd.runs.Host``).

It is the daemon's client side of ``ask``, so it lives with the daemon, above ``runs/``
(which defines the seam and ``LocalHost``). Light: the client, the protocol and the
contract, never the server, agents or engines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid
from pathlib import Path

from .._errors import DaemonError, DaemonUnavailable, JarvisError
from .._events import Event, EventType
from .._runcontext import RunContext
from ..runs._hosts import INTERRUPTED, Host
from ..runs._outcome import Failure, RunOutcome
from ..runs._spec import AgentSpec

__all__ = ["FORWARDED_EVENTS", "DaemonHost"]

#: Run events a daemon forwards to the caller (the rest stay in its trace).
FORWARDED_EVENTS = frozenset({EventType.TOOL_CALL_START, EventType.TOOL_CALL_END})


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

        from ._client import Client
        from ._protocol import Delta, EventReply, ResultReply

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
