"""jarvis's one HTTP/1.1 server, on asyncio streams, parsed by h11: the gateway, the
model server (``jarvis serve-model``, ``jarvis serve``) and the console are its apps.

An :class:`App` has one required method, ``handle``; ``admit`` and ``refuse`` are
optional hooks (without them every head is admitted and refusals are ``{"error": ...}``).

Every client is hostile until its request passes ``App.admit`` (the gateway checks the
run's token there; the model server the Host, Origin and token): a request line and headers are bounded (``MAX_HEAD`` bytes,
``MAX_HEADERS`` lines), a body is read only after admission and only up to
``MAX_BODY`` bytes (a Content-Length over it is refused before a byte is read; a chunked
body is cut off when it passes it), and a client that is slow to send a request, or to
read a reply, is dropped. A refused request's connection is closed, its body unread.

Connections that have not yet shown the token are cheap to open and could starve the
agent's own: each has only ``FIRST_HEAD_TIMEOUT`` for its first head, and at most
``MAX_PENDING`` wait at once (a new one pushes out the oldest, so a client that sends
its head at once always gets in). ``MAX_CONNECTIONS`` counts admitted connections.

Replies are whole bodies or streams of byte chunks (server-sent events, NDJSON); a
client that goes away mid-stream closes the stream, which stops the generation behind
it. A stream that raises :class:`Hangup` drops the connection with its reply unfinished
(a client that reads a stream's end must not see one that did not happen).

The limits are this module's constants; a server may set its own body bound and
timeouts (:class:`Limits`), as the model server does for Ollama's clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import parse_qsl, unquote, urlsplit

if TYPE_CHECKING:
    from h11 import PAUSED, Event

__all__ = ["App", "HTTPServer", "Hangup", "Limits", "Request", "Response"]

log = logging.getLogger(__name__)

MAX_HEAD = 16 * 1024
MAX_HEADERS = 100
MAX_BODY = 16 * 1024 * 1024
#: From a connection's first byte (or its previous reply) to a whole request head.
HEAD_TIMEOUT = 60.0
#: For the whole body, once the head is in.
BODY_TIMEOUT = 60.0
#: For each write to drain: a client that stops reading is dropped.
WRITE_TIMEOUT = 60.0
#: Connections past their first admitted request, at once.
MAX_CONNECTIONS = 64
#: Connections still to send an admitted request head, at once (the oldest goes).
MAX_PENDING = 16
#: For a connection's first head: the agent sends its own at once; a stalling client
#: without the token is dropped well before it could crowd anyone out.
FIRST_HEAD_TIMEOUT = 5.0
_READ = 64 * 1024
#: A Content-Length h11 refuses for its length alone (over 20 digits): over any bound.
_HUGE_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*[0-9]{21,}[ \t]*\r\n", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str  # percent-decoded, without the query
    query: Mapping[str, str]
    headers: Mapping[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes = b""


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    #: When set, the body is streamed from it (chunked) and ``body`` is ignored.
    stream: AsyncIterator[bytes] | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)


class App(Protocol):
    """What a server serves: ``handle`` is all an app must have. It may also define

    - ``admit(request) -> Response | None``: check a request's head (its body not read
      yet): None to go on, or the refusal to send before closing the connection;
    - ``refuse(request, status, message) -> Response``: the reply for a request the
      HTTP layer refuses (``request``: its head, when it got that far).
    """

    async def handle(self, request: Request) -> Response: ...


Admit = Callable[[Request], "Response | None"]
Refuse = Callable[["Request | None", int, str], Response]


def _admit_all(request: Request) -> Response | None:
    return None


def _plain_refusal(request: Request | None, status: int, message: str) -> Response:
    return Response(status, json.dumps({"error": message}).encode())


@dataclass(frozen=True, slots=True)
class Limits:
    """A server's own bounds; None: the module's constant (read when used)."""

    max_body: int | None = None
    first_head_timeout: float | None = None
    write_timeout: float | None = None


class Hangup(Exception):
    """Raised by a reply's stream: drop the connection, the reply left unfinished."""


class _Close(Exception):
    """The connection is done: the peer left, timed out or broke the protocol."""


@dataclass(frozen=True, slots=True)
class _Hooks:
    """An app's methods as the connections call them, optional ones filled in."""

    handle: Callable[[Request], Awaitable[Response]]
    admit: Admit
    refuse: Refuse
    limits: Limits

    @classmethod
    def of(cls, app: App, limits: Limits) -> _Hooks:
        admit: Admit = getattr(app, "admit", _admit_all)
        refuse: Refuse = getattr(app, "refuse", _plain_refusal)
        return cls(app.handle, admit, refuse, limits)

    @property
    def max_body(self) -> int:
        return MAX_BODY if self.limits.max_body is None else self.limits.max_body

    @property
    def first_head_timeout(self) -> float:
        limit = self.limits.first_head_timeout
        return FIRST_HEAD_TIMEOUT if limit is None else limit

    @property
    def write_timeout(self) -> float:
        limit = self.limits.write_timeout
        return WRITE_TIMEOUT if limit is None else limit


class HTTPServer:
    """Serves ``app`` on a listening asyncio server the caller starts with
    :meth:`connection` as its client callback; :meth:`aclose` ends every connection."""

    def __init__(
        self,
        app: App,
        peer: Callable[[asyncio.StreamWriter], Awaitable[bool]] | None = None,
        limits: Limits = Limits(),
    ) -> None:
        self.app = app
        self._hooks = _Hooks.of(app, limits)
        #: Checks who is connected before a byte is read (None: anyone may try).
        self.peer = peer
        self._tasks: set[asyncio.Task[None]] = set()
        #: Connections not admitted yet, oldest first (a dict keeps insertion order).
        self._pending: dict[asyncio.Task[None], None] = {}
        self._evicted: set[asyncio.Task[None]] = set()
        self._closing = False

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._pending) >= MAX_PENDING:
            oldest = next(iter(self._pending))
            del self._pending[oldest]
            self._evicted.add(oldest)
            oldest.cancel()
        if len(self._tasks) - len(self._pending) >= MAX_CONNECTIONS:
            writer.close()
            return
        self._tasks.add(task)
        self._pending[task] = None
        try:
            if self.peer is not None and not await self.peer(writer):
                return
            await _Connection(
                self._hooks, reader, writer, admitted=lambda: self._pending.pop(task, None)
            ).serve()
        except asyncio.CancelledError:
            # asyncio's server logs a handler task that ends cancelled as an error;
            # ours are cancelled only by ``aclose`` or to make room for a newer pending
            # connection, which are normal ways to end.
            if not self._closing and task not in self._evicted:
                raise
        finally:
            self._tasks.discard(task)
            self._pending.pop(task, None)
            self._evicted.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def aclose(self) -> None:
        self._closing = True
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _Connection:
    def __init__(
        self,
        app: _Hooks,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        admitted: Callable[[], object] = lambda: None,
    ) -> None:
        import h11

        self.h11 = h11
        self.app = app
        self.reader = reader
        self.writer = writer
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        #: Called once, when a request of this connection is first admitted.
        self.on_admitted = admitted
        self.admitted = False
        #: The bytes of the head being read (bounded): to tell why h11 refused it.
        self.raw_head = bytearray()

    async def serve(self) -> None:
        h11 = self.h11
        try:
            while True:
                head = await self._head()
                if head is None:
                    return
                refusal = self.app.admit(head)
                if refusal is not None:
                    await self._send(refusal, close=True)
                    return
                if not self.admitted:
                    self.admitted = True
                    self.on_admitted()
                request = await self._body(head)
                if request is None:
                    return
                await self._watched(self._respond(request))
                if self.conn.our_state is not h11.DONE or self.conn.their_state is not h11.DONE:
                    return
                self.conn.start_next_cycle()
        except _Close:
            return

    async def _respond(self, request: Request) -> None:
        await self._send(await self.app.handle(request))

    async def _watched(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` (a reply being made and sent) in this task while a watcher reads
        the client: when it closes its side, this task is cancelled, and with it the
        generation for nobody (one helper task per request, not two)."""
        task = asyncio.current_task()
        assert task is not None
        left = False

        def client_left(watch: asyncio.Task[None]) -> None:
            nonlocal left
            if not watch.cancelled():
                left = True
                task.cancel()

        watch = asyncio.ensure_future(self._until_eof())
        watch.add_done_callback(client_left)
        try:
            await work
        except asyncio.CancelledError:
            if left and task.uncancel() == 0:
                raise _Close from None
            raise
        finally:
            watch.remove_done_callback(client_left)
            watch.cancel()
            # Wait until it has stopped reading: the next request's head is read from
            # the same stream, and asyncio allows one reader at a time.
            await asyncio.wait([watch])
        if left:  # the reply went out, but the client has closed: so does the connection
            raise _Close

    async def _until_eof(self) -> None:
        # What a client sends meanwhile (a pipelined request) is kept for h11; past a
        # head's worth, reading stops and the client waits its turn.
        buffered = 0
        while buffered <= MAX_HEAD:
            try:
                data = await self.reader.read(_READ)
            except ConnectionError:
                return
            if not data:
                return
            buffered += len(data)
            self.conn.receive_data(data)
        await asyncio.Event().wait()

    async def _event(self) -> Event | type[PAUSED]:
        h11 = self.h11
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return cast("Event | type[PAUSED]", event)
            try:
                data = await self.reader.read(_READ)
            except ConnectionError:
                raise _Close from None
            if self.conn.their_state is h11.IDLE and len(self.raw_head) <= MAX_HEAD:
                self.raw_head += data
            self.conn.receive_data(data)

    async def _head(self) -> Request | None:
        h11 = self.h11
        first = self.app.first_head_timeout
        limit = HEAD_TIMEOUT if self.admitted else min(first, HEAD_TIMEOUT)
        self.raw_head.clear()
        try:
            async with asyncio.timeout(limit):
                event = await self._event()
        except TimeoutError:
            if self.conn.their_state is h11.IDLE and not self.conn.trailing_data[0]:
                return None  # an idle keep-alive connection: close it quietly
            await self._refuse(None, 408, "request head not received in time")
            return None
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint
            if _HUGE_LENGTH.search(self.raw_head):
                max_body = self.app.max_body
                await self._refuse(None, 413, f"request body over {max_body} bytes")
                return None
            await self._refuse(None, 431 if status == 431 else 400, f"bad request: {exc}")
            return None
        if isinstance(event, h11.ConnectionClosed):
            return None
        if not isinstance(event, h11.Request):
            await self._refuse(None, 400, "bad request")
            return None
        if len(event.headers) > MAX_HEADERS:
            await self._refuse(None, 431, f"more than {MAX_HEADERS} header lines")
            return None
        # h11 bounds a head still arriving; one that arrived whole in a read is ours.
        if len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers) > MAX_HEAD:
            await self._refuse(None, 431, f"request head over {MAX_HEAD} bytes")
            return None
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
        target = urlsplit(event.target.decode("latin-1"))
        head = Request(
            method=event.method.decode("ascii", "replace"),
            path=unquote(target.path),
            query=dict(parse_qsl(target.query)),
            headers=headers,
        )
        length = headers.get("content-length")
        # h11 has checked it is digits, and one value; the size is ours to check.
        max_body = self.app.max_body
        if length is not None and int(length) > max_body:
            await self._refuse(head, 413, f"request body over {max_body} bytes")
            return None
        return head

    async def _body(self, head: Request) -> Request | None:
        h11 = self.h11
        chunks, size, max_body = [], 0, self.app.max_body
        try:
            async with asyncio.timeout(BODY_TIMEOUT):
                while True:
                    event = await self._event()
                    if isinstance(event, h11.Data):
                        size += len(event.data)
                        if size > max_body:
                            await self._refuse(head, 413, f"request body over {max_body} bytes")
                            return None
                        chunks.append(event.data)
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    else:  # ConnectionClosed mid-body
                        return None
        except TimeoutError:
            await self._refuse(head, 408, "request body not received in time")
            return None
        except h11.RemoteProtocolError as exc:
            await self._refuse(head, 400, f"bad request body: {exc}")
            return None
        return Request(head.method, head.path, head.query, head.headers, b"".join(chunks))

    async def _refuse(self, head: Request | None, status: int, message: str) -> None:
        if self.conn.our_state not in (self.h11.IDLE, self.h11.SEND_RESPONSE):
            return
        with contextlib.suppress(_Close):
            await self._send(self.app.refuse(head, status, message), close=True)

    async def _write(self, *events: Event) -> None:
        data = b"".join(self.conn.send(event) or b"" for event in events)
        if not data:
            return
        try:
            self.writer.write(data)
            async with asyncio.timeout(self.app.write_timeout):
                await self.writer.drain()
        except (ConnectionError, TimeoutError):
            raise _Close from None

    async def _send(self, response: Response, *, close: bool = False) -> None:
        h11 = self.h11
        headers = [("content-type", response.content_type), *response.headers]
        if response.stream is None:
            headers.append(("content-length", str(len(response.body))))
        else:
            headers.append(("cache-control", "no-cache"))
        if close:
            headers.append(("connection", "close"))
        try:
            head = h11.Response(
                status_code=response.status, headers=headers, reason=_reason(response.status)
            )
            if response.stream is None:  # one write: head, body and end together
                await self._write(head, h11.Data(data=response.body), h11.EndOfMessage())
                return
            await self._write(head)
            await self._pump(response.stream)
            await self._write(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:  # pragma: no cover - a bug here, not the peer's
            log.error("gateway reply broke HTTP: %s", exc)
            raise _Close from None

    async def _pump(self, stream: AsyncIterator[bytes]) -> None:
        try:
            async for data in stream:
                if data:
                    await self._write(self.h11.Data(data=data))
        except Hangup as exc:
            log.info("reply dropped: %s", exc)
            raise _Close from None
        finally:
            # The client is gone or the stream ended: either way the producer stops.
            closer: Callable[[], Awaitable[None]] | None = getattr(stream, "aclose", None)
            if closer is not None:
                await closer()


def _reason(status: int) -> bytes:
    """The status line's reason phrase ("400 Bad Request"): h11 sends none by default."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""
