"""Binding a gateway's Unix socket to one container: a token alone is not enough.

The sandboxed agent holds the run's token in its environment, and any host account
with the container user's uid (10001) can read ``/proc/PID/environ`` of the agent's
processes and connect to the socket, which is that uid's. So, when bound, each
connection's peer (``SO_PEERCRED``: the pid that called ``connect``, in jarvis's pid
namespace) must live in the run container's pid namespace, which no process outside
the container can enter without root (``setns`` into it needs ``CAP_SYS_ADMIN``
there). The namespace is learned once the container runs; a connection that comes
before waits for it (the forwarder inside may be quicker than ``docker inspect``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct

__all__ = ["PeerBinding", "peer_pid"]

#: How long a connection waits for the container's namespace to be known.
BIND_WAIT_S = 60.0
_UCRED = struct.Struct("3i")


def _namespace(pid: int) -> tuple[int, int]:
    info = os.stat(f"/proc/{pid}/ns/pid")
    return (info.st_dev, info.st_ino)


def peer_pid(sock: socket.socket) -> int:
    """The pid (in our namespace) of the process that connected ``sock``; 0 when
    it is not visible from here."""
    data = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, _uid, _gid = _UCRED.unpack(data)
    return int(pid)


class PeerBinding:
    """Admits only peers in the pid namespace of the process :meth:`bind` names."""

    def __init__(self) -> None:
        self._namespace: tuple[int, int] | None = None
        self._known = asyncio.Event()

    def bind(self, pid: int) -> None:
        """Admit peers in ``pid``'s pid namespace (the container's init) from now on."""
        self._namespace = _namespace(pid)
        self._known.set()

    async def admits(self, sock: socket.socket | None) -> bool:
        if sock is None:
            return False
        try:
            pid = peer_pid(sock)
        except OSError:
            return False
        if pid <= 0:
            return False  # from a namespace we cannot see: not the run's container
        try:
            await asyncio.wait_for(self._known.wait(), BIND_WAIT_S)
            return _namespace(pid) == self._namespace
        except (TimeoutError, OSError):
            return False
