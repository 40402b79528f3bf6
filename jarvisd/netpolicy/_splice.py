"""Relaying an opened tunnel's bytes both ways, as cheaply as the platform allows.

Once a tunnel's first bytes are checked, what follows is opaque (TLS records, or a
protocol the proxy does not read). Moving it through stream readers costs copies
and a task switch per chunk. On Linux the bytes go socket -> pipe -> socket with
``splice(2)``, never entering Python's memory; elsewhere each side's protocol
writes what it receives straight to the other side's transport, with the
transports' flow control. Either way every byte is counted against the budget, and
a connection with no byte either way for the idle timeout is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from typing import Protocol

__all__ = ["Counter", "splice"]


class Counter(Protocol):
    """What the relay reports to (the session)."""

    last: float

    def count(self, n: int, *, up: bool) -> str:
        """Counts ``n`` bytes; returns why to stop ("" to go on)."""
        ...


class _Side(asyncio.Protocol):
    def __init__(self, relay: _Relay, up: bool) -> None:
        self.relay, self.up = relay, up
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.eof = False

    def data_received(self, data: bytes) -> None:
        relay, peer = self.relay, self.peer
        assert peer is not None and peer.transport is not None
        stop = relay.counter.count(len(data), up=self.up)
        if stop:
            relay.finish(stop)
            return
        relay.counter.last = time.monotonic()
        peer.transport.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        peer = self.peer
        assert peer is not None and peer.transport is not None
        if peer.eof:
            self.relay.finish("")
            return False
        if peer.transport.can_write_eof():
            peer.transport.write_eof()  # a half-close: the answer may still come
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.relay.finish("")

    # Our transport's outgoing buffer is full: stop reading what fills it.
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class _Relay:
    def __init__(self, counter: Counter, idle_timeout: float) -> None:
        self.counter = counter
        self.idle_timeout = idle_timeout
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[str] = self.loop.create_future()
        self.sides: list[_Side] = []
        self._timer: asyncio.TimerHandle | None = None

    def watch(self) -> None:
        left = self.counter.last + self.idle_timeout - time.monotonic()
        if left <= 0:
            self.finish(f"idle for {self.idle_timeout:g} s")
            return
        self._timer = self.loop.call_later(left, self.watch)

    def finish(self, reason: str) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for side in self.sides:
            if side.transport is not None and not side.transport.is_closing():
                side.transport.close()
        if not self.done.done():
            self.done.set_result(reason)


async def _transport_relay(
    client: asyncio.Transport,
    upstream: asyncio.Transport,
    counter: Counter,
    idle_timeout: float,
    *,
    client_eof: bool = False,
    upstream_eof: bool = False,
) -> str:
    """Relays until both sides close, one fails, the budget is spent or the idle
    timeout passes; returns why it stopped early ("" when the sides closed).
    ``*_eof``: that side had already ended what it sends."""
    relay = _Relay(counter, idle_timeout)
    up, down = _Side(relay, True), _Side(relay, False)
    up.transport, down.transport = client, upstream
    up.peer, down.peer = down, up
    relay.sides = [up, down]
    client.set_protocol(up)
    upstream.set_protocol(down)
    for side, ended in ((up, client_eof), (down, upstream_eof)):
        if ended:
            side.eof_received()
    if client.is_closing() or upstream.is_closing() or (client_eof and upstream_eof):
        relay.finish("")
    else:
        client.resume_reading()
        upstream.resume_reading()
        relay.watch()
    try:
        return await relay.done
    finally:
        relay.finish("")


#: Bytes moved per splice call, and the pipe's size when the kernel grants it.
_SPLICE_BYTES = 1 << 20
_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)


class _Way:
    """One direction: src socket -> pipe -> dst socket."""

    def __init__(self, relay: _KernelRelay, src: int, dst: int, dst_sock: object, up: bool) -> None:
        self.relay, self.src, self.dst, self.dst_sock, self.up = relay, src, dst, dst_sock, up
        self.pipe_r, self.pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        with contextlib.suppress(OSError, AttributeError):
            import fcntl

            fcntl.fcntl(self.pipe_w, fcntl.F_SETPIPE_SZ, _SPLICE_BYTES)
        self.pending = 0
        self.eof = False
        self.reading = self.writing = False

    def start(self) -> None:
        self._read_on()

    def _read_on(self) -> None:
        if not self.reading:
            self.relay.loop.add_reader(self.src, self.readable)
            self.reading = True

    def _read_off(self) -> None:
        if self.reading:
            self.relay.loop.remove_reader(self.src)
            self.reading = False

    def readable(self) -> None:
        try:
            n = os.splice(self.src, self.pipe_w, _SPLICE_BYTES, flags=_SPLICE_FLAGS)
        except BlockingIOError:
            return
        except OSError as exc:
            self.relay.finish(f"connection lost ({exc.strerror or exc})", error=True)
            return
        if n == 0:
            self.eof = True
            self._read_off()
            self._ended()
            return
        stop = self.relay.counter.count(n, up=self.up)
        if stop:
            self.relay.finish(stop)
            return
        self.relay.counter.last = time.monotonic()
        self.pending += n
        self.flush()

    def flush(self) -> None:
        while self.pending:
            try:
                m = os.splice(self.pipe_r, self.dst, self.pending, flags=_SPLICE_FLAGS)
            except BlockingIOError:
                # The receiver is full: stop reading until it takes what is in the pipe.
                self._read_off()
                if not self.writing:
                    self.relay.loop.add_writer(self.dst, self.flush)
                    self.writing = True
                return
            except OSError as exc:
                self.relay.finish(f"connection lost ({exc.strerror or exc})", error=True)
                return
            self.pending -= m
        if self.writing:
            self.relay.loop.remove_writer(self.dst)
            self.writing = False
        if self.eof:
            self._ended()
        else:
            self._read_on()

    def _ended(self) -> None:
        if self.pending:
            return  # flush() calls again once the pipe is empty
        with contextlib.suppress(OSError):
            self.dst_sock.shutdown(socket.SHUT_WR)  # type: ignore[attr-defined]
        self.relay.way_ended()

    def close(self) -> None:
        self._read_off()
        if self.writing:
            self.relay.loop.remove_writer(self.dst)
            self.writing = False
        for fd in (self.pipe_r, self.pipe_w):
            with contextlib.suppress(OSError):
                os.close(fd)


class _KernelRelay:
    def __init__(self, counter: Counter, idle_timeout: float) -> None:
        self.counter, self.idle_timeout = counter, idle_timeout
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[str] = self.loop.create_future()
        self.ways: list[_Way] = []
        self.sockets: list[socket.socket] = []
        self._timer: asyncio.TimerHandle | None = None

    def watch(self) -> None:
        left = self.counter.last + self.idle_timeout - time.monotonic()
        if left <= 0:
            self.finish(f"idle for {self.idle_timeout:g} s")
            return
        self._timer = self.loop.call_later(left, self.watch)

    def way_ended(self) -> None:
        if all(w.eof and not w.pending for w in self.ways):
            self.finish("")

    def finish(self, reason: str, *, error: bool = False) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for way in self.ways:
            way.close()
        for sock in self.sockets:
            sock.close()
        self.sockets = []
        if not self.done.done():
            self.done.set_result("" if error else reason)


async def splice(
    client: asyncio.Transport,
    upstream: asyncio.Transport,
    counter: Counter,
    idle_timeout: float,
    *,
    client_eof: bool = False,
    upstream_eof: bool = False,
) -> str:
    """Relays until both sides close, one fails, the budget is spent or the idle
    timeout passes; returns why it stopped early ("" when the sides closed).
    ``*_eof``: that side had already ended what it sends. Both transports are
    closed when it returns."""
    sockets = [t.get_extra_info("socket") for t in (client, upstream)]
    if (
        not hasattr(os, "splice")
        or None in sockets
        or client.get_write_buffer_size()
        or (upstream.get_write_buffer_size())
    ):
        return await _transport_relay(
            client,
            upstream,
            counter,
            idle_timeout,
            client_eof=client_eof,
            upstream_eof=upstream_eof,
        )
    # asyncio lets no one else watch a transport's socket: the relay takes
    # duplicates of both, and the transports (nothing left to write) let go of theirs.
    client_sock, upstream_sock = (s.dup() for s in sockets)
    client.abort()
    upstream.abort()
    relay = _KernelRelay(counter, idle_timeout)
    up = _Way(relay, client_sock.fileno(), upstream_sock.fileno(), upstream_sock, True)
    down = _Way(relay, upstream_sock.fileno(), client_sock.fileno(), client_sock, False)
    relay.ways = [up, down]
    relay.sockets = [client_sock, upstream_sock]
    try:
        for way, ended in ((up, client_eof), (down, upstream_eof)):
            if ended:
                way.eof = True
                way._ended()
            else:
                way.start()
        if not relay.done.done():
            relay.watch()
        return await relay.done
    finally:
        relay.finish("")
