"""Small facts about processes, shared by the CLI, the daemon and the sandbox."""

from __future__ import annotations

import contextlib
import os
from typing import NoReturn

__all__ = ["EXIT_HOST_GONE", "exit_host_gone", "pid_alive"]

#: A worker's exit status when the daemon that fed it went away (EX_TEMPFAIL).
EXIT_HOST_GONE = 75


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and can still act (one of another user's
    counts). A zombie cannot: killed, it waits for a parent to reap it, and a worker
    whose daemon was killed waits for whatever adopted it, which may take its time."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
            return stat.read().rpartition(b")")[2].split()[:1] != [b"Z"]
    except OSError:
        return True  # no /proc to ask: it exists


def exit_host_gone() -> NoReturn:
    """End a worker whose daemon went away: nothing it does can be recorded any more,
    so stop before anything else has an effect, and take the subprocesses its tools
    started along (the daemon that would have ended them may be gone)."""
    with contextlib.suppress(Exception):
        import psutil

        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
    os._exit(EXIT_HOST_GONE)
