"""Carry out one file operation with another user's permissions: the sandboxed
agent's, when jarvis runs as root.

An agent's ``fs/*`` requests must not be able to do more than the agent could do
itself inside its container (read a root-only file, write into a root-owned
directory). A forked child opens nothing new before it drops every id (groups, then
gid, then uid, saved ones included) and then works from a descriptor of the
workspace root that the parent opened: the root may sit in a directory only root can
traverse (``/root/project``), which the container reaches through its bind mount all
the same. The child execs nothing and imports nothing (everything it runs is already
loaded), and leaves with ``os._exit``: no atexit handler, no buffered output of the
parent's runs twice.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .._errors import ToolError

__all__ = ["call_as"]

_OK, _FAILED = b"0", b"1"


def call_as(user: tuple[int, int], root_fd: int, work: Callable[[int], bytes], limit: int) -> bytes:
    """``work(root_fd)`` run as ``user`` (uid, gid, no supplementary groups); its
    bytes (at most ``limit`` are taken), or the ToolError it raised."""
    uid, gid = user
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, measured through the parent
        status = 1
        try:
            os.close(read_end)
            try:
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
                if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
                    raise ToolError("could not take the agent's user for the request")
                out = _OK + work(root_fd)
            except ToolError as exc:
                out = _FAILED + str(exc).encode("utf-8", "replace")
            except BaseException as exc:  # reported to the parent, never raised here
                out = _FAILED + f"the request failed: {type(exc).__name__}: {exc}".encode(
                    "utf-8", "replace"
                )
            view = memoryview(out)
            while view:
                view = view[os.write(write_end, view) :]
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    chunks: list[bytes] = []
    size = 0
    try:
        while chunk := os.read(read_end, 1 << 16):
            if size <= limit + 1:  # keep reading past the limit: the child must finish
                chunks.append(chunk)
                size += len(chunk)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    data = b"".join(chunks)
    if data[:1] == _OK:
        return data[1 : limit + 1]
    message = data[1:].decode("utf-8", "replace") or "the request failed"
    raise ToolError(message)
