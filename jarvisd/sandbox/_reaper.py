"""Containers to remove once a stalled container engine answers again.

When the engine stops answering, a run cannot remove its container (and a create that
was under way may still make one when the engine resumes: the request sits in the
engine's socket). The run fails at once instead of waiting; what it could not remove is
handed here by id or by the name it was created with, and a background thread of this
process pings the engine every few seconds and removes them when it answers. A process
that exits before then leaves them to the orphan sweep (owner label): the daemon's
periodic sweep, or ``jarvis sandbox sweep``.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["RETRY_EVERY_S", "SETTLE_S", "answers", "pending", "remove_later"]

log = logging.getLogger(__name__)

#: How often the thread asks a stalled engine whether it answers again.
RETRY_EVERY_S = 2.0
#: A name not found counts as gone only once the engine has answered this long: a create
#: sent before the stall may still be on its way and make the container after our look.
SETTLE_S = 10.0

_lock = threading.Lock()
#: Engine address -> (how to connect, ids or names still to remove).
_pending: dict[str, tuple[Callable[[], Any], set[str]]] = {}
_threads: dict[str, threading.Thread] = {}


def pending(address: str) -> set[str]:
    """What is still waiting to be removed on the engine at ``address``."""
    with _lock:
        entry = _pending.get(address)
        return set(entry[1]) if entry else set()


def remove_later(address: str, connect: Callable[[], Any], ref: str) -> None:
    """Remove container ``ref`` (id or name) from the engine at ``address`` as soon as
    it answers; ``connect()`` gives a fresh ``docker.DockerClient``."""
    with _lock:
        entry = _pending.setdefault(address, (connect, set()))
        entry[1].add(ref)
        thread = _threads.get(address)
        if thread is not None and thread.is_alive():
            return
        thread = threading.Thread(
            target=_retry, args=(address,), name="sandbox-reaper", daemon=True
        )
        _threads[address] = thread
    thread.start()


def _retry(address: str) -> None:
    stop = threading.Event()  # never set: the thread ends when nothing is left
    answering_since: float | None = None
    while True:
        with _lock:
            entry = _pending.get(address)
            if not entry or not entry[1]:
                _pending.pop(address, None)
                _threads.pop(address, None)
                return
            connect, refs = entry[0], set(entry[1])
        answered, done = False, set[str]()
        if answers(address):
            answered, done = _remove(connect, refs, settled=answering_since)
        if not answered:
            answering_since = None
        elif answering_since is None:
            answering_since = time.monotonic()
        with _lock:
            entry = _pending.get(address)
            if entry is not None:
                entry[1].difference_update(done)
        if done != refs:
            stop.wait(RETRY_EVERY_S)


def answers(address: str, timeout: float = 5.0) -> bool:
    """Whether the engine at ``address`` answers a ping. A Unix socket is asked with a
    plain socket: the SDK leaks the socket of each failed connection, and this is
    asked every few seconds for as long as the engine is away."""
    if not address.startswith("unix://"):
        return True  # let the client try
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(address.removeprefix("unix://"))
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            head = sock.recv(64)
            return head.startswith(b"HTTP/1.") and head[8:13] == b" 200 "
    except OSError:
        return False


def _remove(
    connect: Callable[[], Any], refs: set[str], *, settled: float | None
) -> tuple[bool, set[str]]:
    """Whether the engine answered, and the refs that are gone now (removed, or not
    there while the engine has answered for SETTLE_S since ``settled``)."""
    import docker.errors
    import requests.exceptions

    from .._errors import SandboxError

    try:
        client = connect()
    except SandboxError:
        return False, set()  # still not answering
    settle_over = settled is not None and time.monotonic() - settled >= SETTLE_S
    done: set[str] = set()
    try:
        for ref in refs:
            try:
                client.api.remove_container(ref, force=True)
            except docker.errors.NotFound:
                if not settle_over:  # a create may still be on its way
                    continue
            except docker.errors.APIError as exc:
                if exc.status_code == 409:  # removal already in progress: look again
                    continue
                log.warning("cannot remove sandbox container %s: %s", ref, exc)
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                return False, done  # stalled again
            done.add(ref)
            log.info("removed sandbox container %s after the engine answered again", ref)
    finally:
        client.close()
    return True, done
