"""Relaying an opened tunnel's bytes both ways at transport level.

Once a tunnel's first bytes are checked, what follows is opaque (TLS records, or a
protocol the proxy does not read). Moving it through stream readers costs a copy
and a task switch per chunk; here each side's protocol writes what it receives
straight to the other side's transport, with the transports' own flow control
(the sender is paused while the receiver's buffer is full), so a download through
the proxy runs near the speed of a direct one. Every byte is still counted against
the budget, and a connection with no byte either way for the idle timeout is closed.
"""

from __future__ import annotations

import asyncio
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
