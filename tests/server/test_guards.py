"""What ``jarvis serve-model`` refuses before it reads a body (issue 11, item 8): bad
lengths, and callers that are not local (DNS rebinding, other web pages), as Ollama."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import ollama
import pytest

from jarvisd.engines import ScriptedEngine, reply
from jarvisd.http._allow import Allowlist
from jarvisd.http.serve import OllamaServer
from jarvisd.http.serve._ollama import MAX_BODY
from jarvisd.testing import OllamaStandIn


@pytest.fixture(scope="module")
def server() -> Iterator[OllamaServer]:
    with OllamaServer(ScriptedEngine([reply("hi")]), port=0) as server:
        yield server


def port_of(server: OllamaServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def exchange(port: int, head: str, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """Send a raw request and read one response, leaving our side open: a server that
    tried to read a body we never send would not answer, and the read would time out."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n" + body)
        response = http.client.HTTPResponse(sock)
        response.begin()
        data = response.read()
        headers = {k.lower(): v for k, v in response.getheaders()}
        after = sock.recv(1) if headers.get("connection") == "close" else b""
        assert after == b""  # closed: nothing left on it is trusted
        return response.status, headers, data


def request(method: str = "GET", path: str = "/api/version", **headers: str) -> str:
    lines = [f"{method} {path} HTTP/1.1"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return "\r\n".join(lines) + "\r\n"


@pytest.mark.parametrize(
    ("length", "status"),
    [
        ("-1", 400),
        ("-99999999", 400),
        ("abc", 400),
        ("1e3", 400),
        ("+5", 400),
        ("0x10", 400),
        ("\u00b2", 400),  # "²".isdigit() is True
        (str(MAX_BODY + 1), 413),
        ("9" * 30, 413),
    ],
)
def test_bad_content_length_is_refused_without_reading(
    server: OllamaServer, length: str, status: int
) -> None:
    head = request("POST", "/api/chat", Host="127.0.0.1", Content_Length=length)
    code, headers, data = exchange(port_of(server), head, b'{"model": "scripted"')
    assert code == status
    assert headers["connection"] == "close"
    assert "Content-Length" in json.loads(data)["error"] or "over" in json.loads(data)["error"]


def test_negative_length_cannot_fill_memory(server: OllamaServer) -> None:
    """The finding: ``Content-Length: -1`` made the server read until the client hung up
    (821 MB). Now it answers at once and closes, whatever follows on the connection."""
    import psutil

    before = psutil.Process().memory_info().rss
    chunk, sent = b"x" * (1 << 20), 0
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=20) as sock:
        head = request("POST", "/api/chat", Host="127.0.0.1", Content_Length="-1")
        sock.sendall(head.encode() + b"\r\n")
        try:
            while sent < 256 * len(chunk):
                sock.sendall(chunk)
                sent += len(chunk)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed before the flood was through: the point
        try:
            reply = sock.recv(65536)
        except ConnectionResetError:
            reply = b""  # the reset for the unread flood overtook the answer
    growth = psutil.Process().memory_info().rss - before
    print(f"sent {sent >> 20} MiB after Content-Length: -1; server RSS grew {growth >> 20} MiB")
    assert reply.startswith(b"HTTP/1.1 400 ") or reply == b""
    assert growth < 64 << 20


def test_conflicting_or_chunked_lengths_are_refused(server: OllamaServer) -> None:
    head = request("POST", "/api/chat", Host="127.0.0.1")
    head += "Content-Length: 5\r\nContent-Length: 6\r\n"
    assert exchange(port_of(server), head)[0] == 400
    head = request("POST", "/api/chat", Host="127.0.0.1", Transfer_Encoding="chunked")
    assert exchange(port_of(server), head, b"ffffffff\r\n")[0] == 411


@pytest.mark.parametrize(
    "host",
    ["evil.example", "evil.example:11434", "localhost.evil.example", "127.0.0.1.nip.io",
     "10.0.0.1", "0.0.0.0", "", "[::1", "localhost:http"],
)  # fmt: skip
def test_foreign_host_is_refused(server: OllamaServer, host: str) -> None:
    head = request("POST", "/api/chat", Host=host, Content_Length=str(MAX_BODY))
    code, headers, data = exchange(port_of(server), head)  # the body is never sent
    assert code == 403
    assert headers["content-type"].startswith("application/json")
    assert "DNS rebinding" in json.loads(data)["error"]


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.0.0.1:{port}", "localhost", "LOCALHOST.:{port}", "[::1]:{port}",
     "app.localhost", "127.0.0.2"],
)  # fmt: skip
def test_loopback_host_is_served(server: OllamaServer, host: str) -> None:
    port = port_of(server)
    code, _, data = exchange(port, request(Host=host.format(port=port)))
    assert code == 200 and "version" in json.loads(data)


def test_request_without_host_is_served(server: OllamaServer) -> None:
    code, _, _ = exchange(port_of(server), "GET /api/version HTTP/1.0\r\n")
    assert code == 200


@pytest.mark.parametrize(
    "origin",
    ["http://evil.example", "https://localhost.evil.example", "null", "file://",
     "http://localhost:3000/page", "ftp://localhost", "http://user@localhost",
     "http://localhost:port"],
)  # fmt: skip
def test_foreign_origin_is_refused(server: OllamaServer, origin: str) -> None:
    head = request("POST", "/api/chat", Host="127.0.0.1", Origin=origin, Content_Length="2")
    code, _, data = exchange(port_of(server), head, b"{}")
    assert code == 403
    assert "origin" in json.loads(data)["error"]


@pytest.mark.parametrize(
    "origin",
    ["http://localhost:3000", "https://127.0.0.1", "http://[::1]:8080", "HTTP://LOCALHOST"],
)
def test_loopback_origin_is_served(server: OllamaServer, origin: str) -> None:
    code, _, _ = exchange(port_of(server), request(Host="localhost", Origin=origin))
    assert code == 200


def test_extra_origins_are_allowed_when_configured() -> None:
    engine = ScriptedEngine([reply("hi")])
    origins = ("https://app.example", "chrome-extension://*")
    with OllamaServer(engine, port=0, origins=origins) as server:
        port = port_of(server)
        for origin in ("https://app.example", "https://APP.example/", "chrome-extension://abc"):
            assert exchange(port, request(Host="localhost", Origin=origin))[0] == 200, origin
        assert exchange(port, request(Host="localhost", Origin="https://app.example.org"))[0] == 403


def test_wildcard_bind_allows_ip_literals_but_not_names() -> None:
    allow = Allowlist.for_server("0.0.0.0")
    assert allow.host_refusal("192.168.1.5:11434") is None
    assert allow.host_refusal(f"{socket.gethostname()}:11434") is None
    assert allow.host_refusal("evil.example:11434") is not None
    bound = Allowlist.for_server("192.168.1.5")
    assert bound.host_refusal("192.168.1.5:11434") is None
    assert bound.host_refusal("192.168.1.6:11434") is not None


def test_the_server_keeps_no_request_bodies(server: OllamaServer) -> None:
    client = ollama.Client(host=server.url, timeout=10)
    client.chat(model="scripted", messages=[{"role": "user", "content": "x" * 10_000}])
    client._client.close()
    assert not hasattr(server, "requests")
    with OllamaStandIn(ScriptedEngine([reply("hi")])) as standin:  # the test seam records
        client = ollama.Client(host=standin.url, timeout=10)
        client.chat(model="scripted", messages=[{"role": "user", "content": "y"}])
        client._client.close()
        assert [p for _, p, _ in standin.requests] == ["/api/chat"]


def test_serve_model_command_refuses_foreign_callers(tmp_path: Path) -> None:
    """The real `jarvis serve-model` process (models load on first use, so none is
    needed to see what it refuses before any engine work)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "jarvisd", "serve-model", "--port", str(port), "-m",
         str(tmp_path / "absent.gguf"), "--allow-origin", "https://app.example"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline()
        assert f"on http://127.0.0.1:{port}" in banner, banner + proc.stderr.read()
        assert exchange(port, request(Host="evil.example"))[0] == 403
        assert exchange(port, request(Host="localhost", Origin="http://evil.example"))[0] == 403
        assert exchange(port, request(Host="localhost", Origin="https://app.example"))[0] == 200
        head = request("POST", "/api/chat", Host="127.0.0.1", Content_Length="-1")
        assert exchange(port, head, b"x" * 65536)[0] == 400
        assert exchange(port, request(Host=f"127.0.0.1:{port}"))[0] == 200
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr:
            proc.stderr.close()
