"""One client connection to the egress proxy, from its request head to its event.

Everything the client sends is hostile: every read is bounded in bytes (h11's
incomplete-event limit for heads, ``chunk_bytes`` for bodies) and in time (the idle
timeout, shared by both directions), and every byte relayed is counted against the
proxy's budget. A session serves one upstream: a CONNECT tunnel, or plain HTTP
requests to one host and port (a request for another host on the same connection
is refused, so keep-alive cannot carry a client from an allowed host to another).

Inside a tunnel the first bytes are looked at before anything is relayed:

- a TLS ClientHello must name the CONNECT target (or nothing) as its server name;
- a plaintext HTTP request is relayed request by request, each re-framed by h11,
  and each must name the target in its Host header (and in an absolute-form URL);
- anything else (SSH, a protocol where the server speaks first) is relayed as bytes:
  it can only reach the address the CONNECT was checked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Final, NoReturn

import h11

from ._connect import ConnectFailed, Refused, open_upstream
from ._events import NetEvent, NetLimits
from ._http import (
    BadTarget,
    Refusal,
    Target,
    authority,
    forward_headers,
    printable,
    refusal_bytes,
    url_target,
)
from ._policy import NetPolicy, normalize_host
from ._splice import splice
from ._tunnel import _End, first_of, take_buffered, tunnel_kind

if TYPE_CHECKING:
    from ._proxy import _Budget

__all__ = ["Session"]

log = logging.getLogger(__name__)

#: Response heads from upstream may be larger than a client's request heads.
UPSTREAM_HEAD_BYTES: Final = 64 * 1024


def _head_size(request: h11.Request) -> int:
    """The size of ``request``'s head as sent (request line, headers, line breaks)."""
    size = len(request.method) + len(request.target) + 12
    return size + sum(len(k) + len(v) + 4 for k, v in request.headers.raw_items()) + 2


class Session:
    def __init__(
        self,
        policy: NetPolicy,
        limits: NetLimits,
        budget: _Budget,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        emit: Callable[[NetEvent], None],
    ) -> None:
        self.policy, self.limits, self.budget, self.emit = policy, limits, budget, emit
        self.reader, self.writer = reader, writer
        self.started = time.time()
        self._t0 = time.monotonic()
        self.last = self._t0
        self.host, self.port, self.method = "", 0, ""
        self.address: str | None = None
        self.allowed, self.reason = False, ""
        self.up = self.down = 0
        self._upstream_writer: asyncio.StreamWriter | None = None

    # -- the event --------------------------------------------------------------------

    def event(
        self,
        *,
        host: str | None = None,
        port: int | None = None,
        allowed: bool | None = None,
        reason: str | None = None,
        method: str | None = None,
    ) -> NetEvent:
        # What the client wrote reaches logs and terminals (``task logs -f``): only
        # printable ASCII, bounded, whatever it sent.
        return NetEvent(
            host=printable(self.host if host is None else host, 260),
            port=self.port if port is None else port,
            address=self.address,
            allowed=self.allowed if allowed is None else allowed,
            reason=printable((self.reason if reason is None else reason) or "closed", 1000),
            method=printable(self.method if method is None else method, 32),
            bytes_up=self.up,
            bytes_down=self.down,
            duration=time.monotonic() - self._t0,
            started=self.started,
        )

    # -- entry --------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._serve()
        except _End as end:
            if end.reason and (end.refused or not self.allowed):
                self.allowed, self.reason = False, end.reason
            elif end.reason:
                self.reason = f"{self.reason}; closed: {end.reason}"
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
            if not self.reason or self.allowed:
                self.reason = (self.reason + "; " if self.reason else "") + (
                    f"connection lost ({type(exc).__name__})"
                )
        except asyncio.CancelledError:
            self.reason = (
                f"{self.reason}; closed: the proxy stopped"
                if self.allowed
                else ("the proxy stopped")
            )
            raise
        except h11.ProtocolError as exc:  # an answer h11 will not pass on as it is
            self.allowed = False
            self.reason = f"a message the proxy cannot relay as HTTP/1.1 ({exc})"
        except Exception as exc:  # a bug here ends this connection, never the proxy
            log.exception("egress proxy: connection to %s:%s failed", self.host, self.port)
            self.allowed, self.reason = False, f"internal error ({type(exc).__name__})"
        finally:
            self.close()
            self.emit(self.event())

    def close(self) -> None:
        for writer in (self.writer, self._upstream_writer):
            if writer is not None:
                transport = writer.transport
                if not transport.is_closing():
                    transport.close()

    def refuse(self, refusal: Refusal) -> NoReturn:
        """Answer with ``refusal`` and end the session, refused."""
        if not self.writer.transport.is_closing():
            self.writer.write(refusal_bytes(refusal))
        raise _End(refusal.reason)

    # -- bounded I/O --------------------------------------------------------------------

    async def read(self, reader: asyncio.StreamReader) -> bytes:
        """Up to ``chunk_bytes``; b"" at EOF. Idle for longer than the idle timeout
        (no byte either way) ends the session."""
        idle = self.limits.idle_timeout
        while True:
            left = self.last + idle - time.monotonic()
            if left <= 0:
                raise _End(f"idle for {idle:g} s", refused=False)
            try:
                async with asyncio.timeout(left):
                    data = await reader.read(self.limits.chunk_bytes)
            except TimeoutError:
                continue  # the other direction may have moved: the loop re-checks
            self.last = time.monotonic()
            return data

    async def send(self, writer: asyncio.StreamWriter, data: bytes, *, up: bool) -> None:
        if not data:
            return
        stop = self.count(len(data), up=up)
        if stop:
            raise _End(stop, refused=False)
        writer.write(data)
        try:
            async with asyncio.timeout(self.limits.idle_timeout):
                await writer.drain()
        except TimeoutError:
            raise _End(
                f"the peer read nothing for {self.limits.idle_timeout:g} s", refused=False
            ) from None
        self.last = time.monotonic()

    async def next_request(self, conn: h11.Connection) -> h11.Request | None:
        """The client's next request head, None when it closes; a head that is not
        HTTP/1.x or larger than the limit is refused."""
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                too_big = exc.error_status_hint == 431
                self.refuse(
                    Refusal(
                        431 if too_big else 400,
                        str(Target(self.host, self.port)) if self.host else "",
                        f"a request head larger than {self.limits.max_head_bytes} bytes"
                        if too_big
                        else f"a request that is not HTTP/1.1 ({exc})",
                    )
                )
            if event is h11.NEED_DATA:
                conn.receive_data(await self.read(self.reader))
                continue
            if isinstance(event, h11.Request):
                # h11 bounds a head that arrives in pieces; one that came in a single
                # read is measured here, so the bound holds however it was sent.
                names = {k for k, _ in event.headers}
                if b"transfer-encoding" in names and b"content-length" in names:
                    # Two framings: an upstream that reads the other one would take the
                    # rest of the body for a request of its own (request smuggling).
                    self.refuse(
                        Refusal(
                            400,
                            str(Target(self.host, self.port)) if self.host else "",
                            "a request with both Content-Length and Transfer-Encoding",
                        )
                    )
                if _head_size(event) > self.limits.max_head_bytes:
                    self.refuse(
                        Refusal(
                            431,
                            str(Target(self.host, self.port)) if self.host else "",
                            f"a request head larger than {self.limits.max_head_bytes} bytes",
                        )
                    )
                return event
            if isinstance(event, h11.ConnectionClosed):
                return None
            raise _End(f"an unexpected {type(event).__name__} from the client")

    # -- requests -----------------------------------------------------------------------

    async def _serve(self) -> None:
        client = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes)
        async with self._head_deadline("request head"):
            request = await self.next_request(client)
        if request is None:
            raise _End("the client sent no request")
        self.method = request.method.decode("ascii", "replace")
        if request.method == b"CONNECT":
            await self._connect(client, request)
        else:
            await self._plain(client, request)

    def _check(self, target: Target) -> tuple[str, int]:
        """The name-level verdict on ``target``; refuses the session when it is no."""
        self.host, self.port = target.host, target.port
        if self.budget.spent:
            self.refuse(Refusal(403, str(target), "the run's network budget is spent"))
        decision = self.policy.decide(target.host, target.port)
        if not decision.allowed:
            self.refuse(Refusal(403, str(target), decision.reason, decision.hint))
        self.reason = decision.reason
        return target.host, target.port

    async def _open(self, target: Target) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        decision = self.policy.decide(target.host, target.port)
        try:
            upstream = await open_upstream(
                self.policy, decision, target.host, target.port, self.limits.connect_timeout
            )
        except Refused as exc:
            self.refuse(Refusal(403, str(target), exc.reason, exc.hint))
        except ConnectFailed as exc:
            self.refuse(Refusal(502, str(target), exc.reason))
        self.address = upstream.address.compressed
        reader, writer = await asyncio.open_connection(
            sock=upstream.sock, limit=self.limits.chunk_bytes * 2
        )
        self._upstream_writer = writer
        self.allowed = True
        return reader, writer

    async def _connect(self, client: h11.Connection, request: h11.Request) -> None:
        try:
            target = authority(request.target.decode("ascii", "replace"), None)
        except BadTarget as exc:
            self.refuse(Refusal(400, "", f"a CONNECT target that is not host:port ({exc})"))
        self._check(target)
        reader, writer = await self._open(target)
        leftover, _closed = client.trailing_data
        self.writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await self._tunnel(target, bytes(leftover), reader, writer)

    async def _plain(self, client: h11.Connection, request: h11.Request) -> None:
        try:
            target, _path = url_target(request.target.decode("ascii", "replace"))
        except BadTarget as exc:
            self.refuse(Refusal(400, "", str(exc)))
        self._host_matches(request, target)
        self._check(target)
        reader, writer = await self._open(target)
        upstream = h11.Connection(h11.CLIENT, max_incomplete_event_size=UPSTREAM_HEAD_BYTES)
        await self._http(client, request, target, reader, writer, upstream, tunnel=False)

    def _host_matches(self, request: h11.Request, target: Target) -> None:
        """A Host header (when sent) must name ``target``: the upstream picks its site
        by it, and a front serving several sites would serve the one it names."""
        hosts = [v for k, v in request.headers if k == b"host"]
        if len(hosts) > 1:
            self.refuse(Refusal(400, str(target), "a request with two Host headers"))
        if not hosts:
            return
        try:
            named = authority(hosts[0].decode("ascii", "replace"), target.port)
            same = normalize_host(named.host) == normalize_host(target.host)
        except ValueError:
            same = False
        if not same or named.port != target.port:
            shown = hosts[0].decode("ascii", "replace")[:100]
            self.refuse(Refusal(403, str(target), f"the Host header names {shown!r}, not {target}"))

    # -- plain HTTP, request by request ---------------------------------------------------

    async def _http(
        self,
        client: h11.Connection,
        request: h11.Request,
        target: Target,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream: h11.Connection,
        *,
        tunnel: bool,
    ) -> None:
        host_header = (f"[{target.host}]" if ":" in target.host else target.host) + (
            "" if target.port == 80 and not tunnel else f":{target.port}"
        )
        while True:
            path = self._origin_form(request, target, tunnel)
            headers = forward_headers(list(request.headers), host_header.encode())
            head = upstream.send(
                h11.Request(method=request.method, target=path, headers=headers, http_version="1.1")
            )
            await self.send(writer, head or b"", up=True)
            body = asyncio.ensure_future(self._body_up(client, upstream, writer))
            down = asyncio.ensure_future(self._response_down(client, upstream, reader))
            try:
                # The first failure ends both; a whole response ends the exchange even
                # when the body is still coming (an early answer: not reusable then).
                for next_done in asyncio.as_completed((body, down)):
                    await next_done
                    if down.done():
                        break
            finally:
                for task in (body, down):
                    task.cancel()
                    if task.done() and not task.cancelled():
                        task.exception()  # retrieved: the first failure is the one raised
            reusable = (
                body.done()
                and not body.cancelled()
                and client.our_state is h11.DONE
                and client.their_state is h11.DONE
                and upstream.our_state is h11.DONE
                and upstream.their_state is h11.DONE
            )
            if not reusable:
                return
            client.start_next_cycle()
            upstream.start_next_cycle()
            following = await self.next_request(client)
            if following is None:
                return
            request = following
            await self._next_same_target(request, target, tunnel)

    async def _next_same_target(self, request: h11.Request, target: Target, tunnel: bool) -> None:
        """A later request on the connection: for the same target only."""
        method = request.method.decode("ascii", "replace")
        if request.method == b"CONNECT":
            self._refuse_later(method, target, target, "a CONNECT after requests")
        if tunnel:
            try:
                if not any(k == b"host" for k, _ in request.headers):
                    self.refuse(Refusal(400, str(target), "a request without a Host header"))
                self._host_matches(request, target)
            except _End as end:
                self.emit(self.event(allowed=False, reason=end.reason, method=method))
                self.reason = f"then: {end.reason}"
                raise _End() from None
            return
        try:
            other, _ = url_target(request.target.decode("ascii", "replace"))
        except BadTarget as exc:
            self._refuse_later(method, target, target, str(exc), status=400)
        try:
            same = (
                normalize_host(other.host) == normalize_host(target.host)
                and other.port == target.port
            )
        except ValueError:
            same = False  # not even a host name: refused below, naming what it was
        if not same:
            self._refuse_later(
                method,
                target,
                other,
                f"this connection serves {target} only: one upstream per connection "
                "(open a new connection for another host)",
            )
        self._host_matches(request, target)

    def _refuse_later(
        self, method: str, served: Target, asked: Target, reason: str, status: int = 403
    ) -> None:
        """Refuse a later request on an allowed connection: its own event, refused; the
        connection's event keeps what it served."""
        self.emit(
            self.event(
                host=asked.host, port=asked.port, allowed=False, reason=reason, method=method
            )
        )
        self.reason = f"{self.reason}; then refused a request for {asked}"
        if not self.writer.transport.is_closing():
            self.writer.write(refusal_bytes(Refusal(status, str(asked), reason)))
        raise _End()

    def _origin_form(self, request: h11.Request, target: Target, tunnel: bool) -> bytes:
        raw = request.target
        if not tunnel:
            return url_target(raw.decode("ascii", "replace"))[1].encode()
        if raw.startswith(b"/") or raw == b"*":
            return raw
        # An absolute-form URL inside a tunnel: servers route by its host, not by the
        # Host header, so it must name the target too.
        text = raw.decode("ascii", "replace")
        scheme, sep, rest = text.partition("://")
        try:
            if not sep or scheme.lower() not in ("http", "https"):
                raise BadTarget("not a URL")
            other, path = url_target("http://" + rest)
            same = normalize_host(other.host) == normalize_host(target.host)
        except ValueError:
            same, path = False, ""
        if not same:
            self.refuse(
                Refusal(
                    403, str(target), f"a request for {text[:100]!r} inside the tunnel to {target}"
                )
            )
        return path.encode()

    async def _body_up(
        self, client: h11.Connection, upstream: h11.Connection, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            event = client.next_event()
            if event is h11.NEED_DATA:
                client.receive_data(await self.read(self.reader))
                continue
            if isinstance(event, h11.Data | h11.EndOfMessage):
                await self.send(writer, upstream.send(event) or b"", up=True)
                if isinstance(event, h11.EndOfMessage):
                    return
                continue
            raise _End()  # closed mid-body, or a PAUSED pipelined request: stop

    async def _response_down(
        self, client: h11.Connection, upstream: h11.Connection, reader: asyncio.StreamReader
    ) -> None:
        while True:
            try:
                event = upstream.next_event()
            except h11.RemoteProtocolError as exc:
                if client.our_state is h11.SEND_RESPONSE:
                    self.refuse(
                        Refusal(
                            502,
                            f"{self.host}:{self.port}",
                            f"the upstream's answer is not HTTP/1.1 ({exc})",
                        )
                    )
                raise _End() from None
            if event is h11.NEED_DATA:
                upstream.receive_data(await self.read(reader))
                continue
            if isinstance(event, h11.InformationalResponse):
                if event.status_code == 101:
                    raise _End("the upstream switched protocols")
                out = client.send(
                    h11.InformationalResponse(
                        status_code=event.status_code,
                        headers=forward_headers(list(event.headers), None),
                    )
                )
            elif isinstance(event, h11.Response):
                out = client.send(
                    h11.Response(
                        status_code=event.status_code,
                        reason=event.reason,
                        headers=forward_headers(list(event.headers), None),
                    )
                )
            elif isinstance(event, h11.Data):
                out = client.send(h11.Data(data=event.data))
            elif isinstance(event, h11.EndOfMessage):
                await self.send(self.writer, client.send(h11.EndOfMessage()) or b"", up=False)
                return
            else:  # closed before the whole response
                if client.our_state is h11.SEND_RESPONSE:
                    self.refuse(
                        Refusal(
                            502, f"{self.host}:{self.port}", "the upstream closed without an answer"
                        )
                    )
                raise _End()
            await self.send(self.writer, out or b"", up=False)

    # -- tunnels ------------------------------------------------------------------------

    async def _tunnel(
        self,
        target: Target,
        first: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        data: bytes = first
        from_upstream: bytes | None = None
        async with self._head_deadline("first message in the tunnel"):
            while True:
                kind = tunnel_kind(data, target, self.limits)
                if kind != "more":
                    break
                from_client, from_upstream = await first_of(self.read, self.reader, reader)
                if from_client is not None:
                    data += from_client
                if from_upstream is not None:
                    kind = "opaque"  # the server speaks first: not a client-first protocol
                    break
                if not from_client:
                    return  # the client closed before saying anything
            if kind == "http":
                client = h11.Connection(
                    h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes
                )
                client.receive_data(data)
                request = await self.next_request(client)
        if kind == "http":
            if request is None:
                return
            if request.method == b"CONNECT":
                self.refuse(Refusal(403, str(target), "a CONNECT inside a tunnel"))
            if not any(k == b"host" for k, _ in request.headers):
                self.refuse(Refusal(400, str(target), "a request without a Host header"))
            self._host_matches(request, target)
            upstream = h11.Connection(h11.CLIENT, max_incomplete_event_size=UPSTREAM_HEAD_BYTES)
            await self._http(client, request, target, reader, writer, upstream, tunnel=True)
            return
        await self.send(writer, data, up=True)
        await self.send(self.writer, from_upstream or b"", up=False)
        await self._splice(reader, writer)

    @contextlib.asynccontextmanager
    async def _head_deadline(self, what: str) -> AsyncIterator[None]:
        """A whole head within ``head_timeout``, however slowly its bytes trickle in
        (each byte would reset the idle timeout)."""
        limit = self.limits.head_timeout
        try:
            async with asyncio.timeout(limit):
                yield
        except TimeoutError:
            raise _End(f"no whole {what} within {limit:g} s") from None

    async def _splice(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The rest of the tunnel, relayed at transport level (see ``_splice``)."""
        await self.send(writer, take_buffered(self.reader), up=True)
        await self.send(self.writer, take_buffered(reader), up=False)
        stop = await splice(
            self.writer.transport,  # type: ignore[arg-type]
            writer.transport,  # type: ignore[arg-type]
            self,
            self.limits.idle_timeout,
            client_eof=self.reader.at_eof(),
            upstream_eof=reader.at_eof(),
        )
        if stop:
            raise _End(stop, refused=False)

    def count(self, n: int, *, up: bool) -> str:
        """Counts ``n`` relayed bytes; returns why to stop when the budget is spent."""
        if not self.budget.spend(n):
            return f"the run's network budget of {self.limits.max_total_bytes} bytes is spent"
        if up:
            self.up += n
        else:
            self.down += n
        return ""
