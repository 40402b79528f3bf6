"""A private Unix socket: bound with mode 0600 from its first moment, never over
something already at its path (a planted file or link would be followed or replaced)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from ._errors import UsageError

__all__ = ["bind_private"]


def bind_private(path: Path, what: str) -> socket.socket:
    """A Unix socket bound at ``path`` (0600); UsageError naming ``what`` (e.g.
    "the gateway") when something is already there or the bind fails."""
    if os.path.lexists(path):
        raise UsageError(f"cannot serve {what} on {path}: something is already there")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # umask, not a chmod after bind: no moment in which another user could connect.
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot serve {what} on {path}: {exc.strerror or exc}") from exc
    finally:
        os.umask(old)
    return sock
