"""The egress proxy of one run: an HTTP proxy (CONNECT and plain HTTP) on a Unix
socket, enforcing a :class:`NetPolicy`, on its own thread and asyncio loop.

The sandbox has no network interface; this socket (mounted in, reached through the
in-container forwarder) is its only way out, so a program that ignores the proxy
variables has no route at all. The socket is created 0600 from its first moment
(chowned to the sandbox's uid when the daemon runs as root), never over something
already at its path, and removed on stop only if it is still the one made here.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from jarvisd._errors import UsageError
from jarvisd._unixsock import bind_private

from ._events import NetEvent, NetLimits
from ._http import Refusal, refusal_bytes
from ._policy import NetPolicy
from ._session import Session

if TYPE_CHECKING:  # the gateway package is not imported to run a proxy
    from jarvisd.gateway._peer import PeerBinding

__all__ = ["EgressProxy"]

log = logging.getLogger(__name__)
#: How long start() waits for the loop to bind, and stop() for it to finish.
_THREAD_WAIT_S = 30.0


class _Budget:
    """Bytes relayed by every connection of one proxy, against one limit. Touched
    only from the proxy's loop."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def spend(self, n: int) -> bool:
        self.used += n
        return self.used <= self.limit

    @property
    def spent(self) -> bool:
        return self.used >= self.limit


class EgressProxy:
    """Start with :meth:`start` (or ``with``); :meth:`stop` closes everything."""

    def __init__(
        self,
        policy: NetPolicy,
        socket_path: Path | str,
        on_event: Callable[[NetEvent], None] | None = None,
        limits: NetLimits | None = None,
        owner_uid: int | None = None,
        peers: PeerBinding | None = None,
    ) -> None:
        self.policy = policy
        self.socket_path = Path(socket_path)
        self.on_event = on_event
        self.limits = limits or NetLimits()
        self.owner_uid = owner_uid
        #: When set, only peers in the bound container's pid namespace are served.
        self.peers = peers
        self._events: collections.deque[NetEvent] = collections.deque(maxlen=self.limits.max_events)
        self._events_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._socket_ino: int | None = None
        self._sessions: set[asyncio.Task[None]] = set()
        self._budget = _Budget(self.limits.max_total_bytes)

    # -- the public surface -------------------------------------------------------------

    @property
    def events(self) -> list[NetEvent]:
        """The connections seen so far, oldest first (the newest ``max_events``)."""
        with self._events_lock:
            return list(self._events)

    @property
    def bytes_used(self) -> int:
        return self._budget.used

    def start(self) -> EgressProxy:
        """Bind the socket and serve it on a thread; returns once it accepts."""
        if self._thread is not None:
            raise UsageError("this egress proxy was already started")
        self._thread = threading.Thread(target=self._main, name="jarvis-egress-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(_THREAD_WAIT_S):
            raise UsageError(f"the egress proxy on {self.socket_path} did not start")
        if self._error is not None:
            self._thread.join(_THREAD_WAIT_S)
            raise self._error
        return self

    def stop(self) -> None:
        """Close the listener and every connection; idempotent."""
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None or not thread.is_alive():
            return
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop has just closed
                loop.call_soon_threadsafe(stopping.set)
        thread.join(_THREAD_WAIT_S)

    def bind_peer(self, pid: int) -> None:
        """Admit peers in ``pid``'s pid namespace (the container's init) from now on."""
        if self.peers is None:
            raise UsageError("this egress proxy was made without a peer binding")
        if self._loop is None:
            self.peers.bind(pid)
        else:
            self._loop.call_soon_threadsafe(self.peers.bind, pid)

    def __enter__(self) -> EgressProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the loop ---------------------------------------------------------------------

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start(), which raises it
            if not self._ready.is_set():
                self._error = exc
            else:
                log.exception("egress proxy: its loop failed")
        finally:
            self._ready.set()
            loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        sock = _bind_private(self.socket_path, self.owner_uid)
        self._socket_ino = os.lstat(self.socket_path).st_ino
        try:
            server = await asyncio.start_unix_server(
                self._accept, sock=sock, limit=self.limits.chunk_bytes * 2
            )
        except BaseException:
            sock.close()
            self._unlink()
            raise
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            await self._cancel_everything(server)
            await server.wait_closed()
            self._unlink()

    async def _cancel_everything(self, server: asyncio.Server) -> None:
        """Closes the listener and ends every connection, each with its event.

        A connection accepted just now is still on its way to a session (asyncio's
        accept task, then the session's task, a few turns of the loop later); closing
        the server under it drops it silently with its socket left open (Python 3.11).
        So: accept nothing more, let those arrive, close the listener (what waits in
        its backlog is reset), then cancel the sessions."""
        loop = asyncio.get_running_loop()
        for sock in server.sockets:
            loop.remove_reader(sock.fileno())
        me = asyncio.current_task()
        for _ in range(100):
            await asyncio.sleep(0)
            starting = [
                t
                for t in asyncio.all_tasks()
                if t is not me and not t.done() and t not in self._sessions
            ]
            if not starting:
                break
        server.close()
        for _ in range(3):
            sessions = [t for t in self._sessions if not t.done()]
            if not sessions:
                return
            for task in sessions:
                task.cancel()
            await asyncio.wait(sessions, timeout=5.0)

    def _unlink(self) -> None:
        # Only the socket made here: something put at the path since stays.
        if self._socket_ino is None:
            return
        with contextlib.suppress(OSError):
            if os.lstat(self.socket_path).st_ino == self._socket_ino:
                self.socket_path.unlink()
        self._socket_ino = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._sessions.add(task)
        session = Session(self.policy, self.limits, self._budget, reader, writer, self._emit)
        running = False  # once the session runs, it reports its own end
        try:
            if self.peers is not None and not await self.peers.admits(
                writer.get_extra_info("socket")
            ):
                session.reason = "a peer outside the run's sandbox"
                return
            if len(self._sessions) > self.limits.max_connections:
                reason = f"more than {self.limits.max_connections} connections at once"
                session.reason = reason
                writer.write(refusal_bytes(Refusal(503, "", reason)))
                return
            running = True
            await session.run()
        except asyncio.CancelledError:
            # The proxy is stopping; the session has reported its end. Not re-raised:
            # Python 3.11's stream callback logs a cancelled connection task as an error.
            pass
        finally:
            self._sessions.discard(task)
            if not running:
                session.close()
                self._emit(session.event())

    def _emit(self, event: NetEvent) -> None:
        with self._events_lock:
            self._events.append(event)
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:  # a reporting failure must not end the connection
                log.exception("egress proxy: on_event failed")


def _bind_private(path: Path, owner_uid: int | None) -> socket.socket:
    """A Unix socket bound at ``path`` with mode 0600 from its first moment, handed to
    ``owner_uid`` when given."""
    sock = bind_private(path, "the egress proxy")
    if owner_uid is not None:
        try:
            os.chown(path, owner_uid, -1, follow_symlinks=False)
        except OSError as exc:
            sock.close()
            with contextlib.suppress(OSError):
                path.unlink()
            raise UsageError(
                f"cannot hand the egress proxy's socket {path} to uid {owner_uid}: "
                f"{exc.strerror or exc}"
            ) from exc
    return sock
