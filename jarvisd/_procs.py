"""Small facts about processes, shared by the CLI, the daemon and the sandbox."""

from __future__ import annotations

import contextlib
import os
from typing import NoReturn

__all__ = ["EXIT_HOST_GONE", "exit_host_gone", "pid_alive"]

#: A worker's exit status when the daemon that fed it went away (EX_TEMPFAIL).
EXIT_HOST_GONE = 75


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
