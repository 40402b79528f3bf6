"""What a task's relay does when the Ray cluster cannot be reached (``[cluster]
fallback``): wait for it (the default), or run the task on this machine ("local").

Both happen in the relay process itself, so the daemon's side of the task is the same
as ever: it hands the relay's stdin and stdout on with ``exec``, either to the task
worker (local: the daemon then speaks to the worker itself) or to a fresh relay that
tries the cluster again (wait: Ray's driver cannot reconnect within one process). The
process id stays the same, so the daemon's cancel and kill reach it throughout.

Each says so with one event before: ``task_placed`` with ``node = "local"`` and the
reason (``task show`` then says local), or ``cluster_waiting`` with the reason.
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, NoReturn

from jarvisd.protocol import EventFrame, encode

from ._backend import WORKER_MODULE

__all__ = ["FALLBACKS", "WAITING_EVENT", "run_locally", "wait_and_retry"]

#: ``[cluster] fallback``'s values, and the relay's mode argument besides them:
#: "-now" means the daemon already knows the cluster is down (skip the first try).
FALLBACKS = ("wait", "local")
WAITING_EVENT = "cluster_waiting"
#: Seconds between two tries of a cluster that could not be reached.
RETRY_S = 10.0
#: Set in a relay that was started again to wait: it said so once already.
_WAITED = "JARVIS_RELAY_WAITED"


def _hand_over(out: IO[bytes], argv: list[str]) -> NoReturn:
    """``exec`` ``argv`` with this process's frame stream as its stdout."""
    out.flush()
    os.dup2(out.fileno(), 1)  # the relay had moved its stdout aside for Ray's prints
    sys.stderr.flush()
    os.execv(sys.executable, argv)


def run_locally(out: IO[bytes], why: str) -> NoReturn:
    """Become the task's worker on this machine, after saying where and why."""
    placed = EventFrame(type="task_placed", data={"node": "local", "fallback": why})
    out.write(encode(placed))
    _hand_over(out, [sys.executable, "-m", WORKER_MODULE])


def wait_and_retry(out: IO[bytes], why: str, relay_argv: list[str]) -> NoReturn:
    """Say the task waits for the cluster (once), then start the relay again."""
    if not os.environ.get(_WAITED):
        out.write(encode(EventFrame(type=WAITING_EVENT, data={"reason": why})))
        os.environ[_WAITED] = "1"
    time.sleep(RETRY_S)
    # The first try of the next relay is a real one, whatever the daemon knew.
    argv = list(relay_argv)  # all of it: the workspace of a jarvis code run follows
    if len(argv) > 3:
        argv[3] = argv[3].removesuffix("-now")
    _hand_over(out, [sys.executable, "-m", "jarvisd.cluster._relay", *argv])
