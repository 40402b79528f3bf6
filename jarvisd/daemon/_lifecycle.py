"""What makes one daemon the daemon: its exit codes, its files, the lock on its
database, and the ping that tells whether another daemon already answers."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

from jarvisd._errors import JarvisError
from jarvisd._paths import paths

__all__ = ["DaemonPaths", "ExitCode", "socket_answers", "take_lock"]


class ExitCode(enum.IntEnum):
    OK = 0  # stopped on request (signal or `shutdown`)
    FAILURE = 1  # an unexpected error
    USAGE = 2
    ALREADY_RUNNING = 73  # another jarvisd answers on the socket
    UNSAFE_RUNTIME_DIR = 77  # the runtime directory is not ours alone (EX_NOPERM)
    CONFIG = 78  # the config file is invalid at start


@dataclass(frozen=True, slots=True)
class DaemonPaths:
    socket: Path
    pid_file: Path
    database: Path
    log_file: Path

    @classmethod
    def default(cls) -> DaemonPaths:
        p = paths()
        return cls(
            p.socket, p.runtime / "jarvisd.pid", p.state / "jarvisd.db", p.state / "jarvisd.log"
        )

    @property
    def lock_file(self) -> Path:
        """Held (flock) by the one daemon that owns the database, for its whole life."""
        return self.database.with_name(self.database.name + ".lock")


def take_lock(path: Path) -> int | None:
    """An exclusive, non-blocking flock on ``path``: the open descriptor that holds it,
    or None when another process holds it. The kernel releases it when the process
    ends, however it ends, so a ``kill -9`` never leaves a stale lock."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def socket_answers(path: Path, timeout: float = 1.0) -> bool:
    """Does a daemon answer a ping on ``path``?"""
    from ._client import Client

    try:
        Client(path, timeout=timeout).ping()
    except JarvisError:
        return False
    return True
