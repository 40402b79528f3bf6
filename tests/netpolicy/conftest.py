"""Real parts for the egress proxy's tests: HTTP and HTTPS upstreams on loopback (TLS
with a CA made here), a proxy per test on a Unix socket, raw clients, and a TCP
forwarder to the socket (what the sandbox's forwarder does) for real HTTP clients.

Loopback is private, so tests reach these upstreams the way a LAN mirror is reached:
an exact allow entry plus a ``hosts`` mapping, e.g. ``upstream.test`` -> 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from jarvisd.netpolicy import EgressProxy, NetEvent, NetPolicy

#: Names the test certificate is valid for (and that tests map to 127.0.0.1).
CERT_NAMES = ("upstream.test", "other.test")


# -- a test CA --------------------------------------------------------------------------


@dataclass
class LocalCA:
    ca_file: Path
    server: ssl.SSLContext

    def client(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def make_ca(directory: Path) -> LocalCA:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("jarvis test CA"))
        .issuer_name(_name("jarvis test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(CERT_NAMES[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(n) for n in CERT_NAMES]
                + [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.OID_SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file = directory / "ca.pem"
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    chain = directory / "server.pem"
    chain.write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(chain))
    return LocalCA(ca_file, server)


# -- upstreams --------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == "/hello":
            self._send(200, f"hello; Host={self.headers.get('Host')}".encode())
        elif url.path == "/redirect":
            self._send(302, b"", {"Location": query["to"][0]})
        elif url.path == "/bytes":
            size = int(query["n"][0])
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            block = b"x" * 65536
            while size > 0:
                self.wfile.write(block[: min(size, len(block))])
                size -= len(block)
        else:
            self._send(404, b"no such page")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self._send(200, b"echo:" + self.rfile.read(length))


@dataclass
class Upstream:
    port: int
    tls: bool
    server: ThreadingHTTPServer


def _serve(context: ssl.SSLContext | None) -> Iterator[Upstream]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Upstream(server.server_address[1], context is not None, server)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> LocalCA:
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="session")
def http_upstream() -> Iterator[Upstream]:
    yield from _serve(None)


@pytest.fixture(scope="session")
def https_upstream(test_ca: LocalCA) -> Iterator[Upstream]:
    yield from _serve(test_ca.server)


# -- the proxy --------------------------------------------------------------------------


class Proxies:
    """Starts proxies for a test and stops them after it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[EgressProxy] = []
        self.seen: list[NetEvent] = []

    def __call__(self, policy: NetPolicy, **kw: Any) -> EgressProxy:
        path = self.directory / f"p{len(self.started)}.sock"
        proxy = EgressProxy(policy, path, on_event=self.seen.append, **kw).start()
        self.started.append(proxy)
        return proxy


@pytest.fixture
def proxies(tmp_path: Path) -> Iterator[Proxies]:
    made = Proxies(tmp_path)
    try:
        yield made
    finally:
        for proxy in made.started:
            proxy.stop()


def mapped(*allow: str, deny: tuple[str, ...] = (), **more: str) -> NetPolicy:
    """A policy with the test names mapped to loopback."""
    hosts = {name: "127.0.0.1" for name in CERT_NAMES} | more
    return NetPolicy.parse(allow=list(allow), deny=list(deny), hosts=hosts, source="test")


def wait_events(proxy: EgressProxy, count: int, timeout: float = 20.0) -> list[NetEvent]:
    """The proxy's events once there are ``count`` (events come when connections end)."""
    deadline = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if len(proxy.events) >= count:
            return proxy.events
        deadline.wait(0.02)
    raise AssertionError(f"{len(proxy.events)} events, not {count}: {proxy.events}")


# -- raw clients --------------------------------------------------------------------------


def unix(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(20)
    sock.connect(str(path))
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything until the other side closes (a reset counts as closed; a socket
    still open after the socket's timeout is a failure, not an end)."""
    out = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            out += chunk
    return out


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


def parse_reply(raw: bytes) -> Reply:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines and lines[0].startswith("HTTP/") else 0
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return Reply(status, headers, body)


def ask(path: Path, request: bytes) -> Reply:
    """Send ``request`` to the proxy and read its whole answer (it closes)."""
    with unix(path) as sock:
        try:
            sock.sendall(request)
        except BrokenPipeError:
            pass  # refused (and closed) before it read the request: its answer is there
        return parse_reply(read_all(sock))


def open_tunnel(path: Path, host: str, port: int) -> tuple[socket.socket, Reply]:
    """A CONNECT through the proxy: the socket (positioned after the proxy's
    answer; closed when it refused) and that answer."""
    sock = unix(path)
    sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    reply = parse_reply(head)
    if reply.status != 200:  # refused: the proxy closes; so does this side
        reply = parse_reply(head + read_all(sock))
        sock.close()
    return sock, reply


@contextlib.contextmanager
def raw_tunnel(
    proxies: Proxies, host: str = "127.0.0.1"
) -> Iterator[tuple[EgressProxy, socket.socket, socket.socket]]:
    """An allowed CONNECT to a raw TCP listener on ``host`` (an IP literal): the proxy,
    the client's end and the server's end, both closed on exit. For protocols that are
    not HTTP or TLS, which the proxy relays as bytes."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    literal = f"[{host}]" if family == socket.AF_INET6 else host
    with socket.socket(family) as listener:
        try:
            listener.bind((host, 0))
        except OSError:
            pytest.skip(f"no {host} on this machine")
        listener.listen(1)
        port = listener.getsockname()[1]
        proxy = proxies(NetPolicy.parse(allow=[f"{literal}:{port}"]))
        sock, reply = open_tunnel(proxy.socket_path, literal, port)
        assert reply.status == 200
        server, _ = listener.accept()
        with sock, server:
            yield proxy, sock, server


# -- a TCP forwarder (the sandbox's side) -------------------------------------------------


class Forwarder:
    """127.0.0.1:PORT -> the proxy's Unix socket, for clients that speak TCP proxies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._tasks: set[asyncio.Task[None]] = set()

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while chunk := await src.read(65536):
                dst.write(chunk)
                await dst.drain()
        with contextlib.suppress(OSError):
            if dst.can_write_eof() and not dst.is_closing():
                dst.write_eof()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(str(self.path))
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except OSError:
            pass
        finally:
            self._tasks.discard(task)
            for w in (writer, up_writer):
                if w is not None:
                    w.close()

    def __enter__(self) -> Forwarder:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._client, "127.0.0.1", 0), self._loop
        ).result(10)
        self._server = server
        self.port = server.sockets[0].getsockname()[1]
        return self

    async def _close(self) -> None:
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)
        await self._server.wait_closed()

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(20)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def tls_through(
    sock: socket.socket, context: ssl.SSLContext, server_hostname: str
) -> Callable[[bytes], bytes]:
    """TLS over an open tunnel; returns a function that sends a request and reads
    the whole reply."""

    def exchange(request: bytes) -> bytes:
        with context.wrap_socket(sock, server_hostname=server_hostname) as tls:
            tls.sendall(request)
            return read_all(tls)

    return exchange
