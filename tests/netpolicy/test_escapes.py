"""The escape battery at the proxy's level: each attempt is refused, and each refusal
is an event naming why. Upstreams are real servers on loopback; names reach them
through the policy's hosts map or the system resolver (``localhost``)."""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.request

import pytest

from jarvisd.netpolicy import NetPolicy

from .conftest import (
    Forwarder,
    LocalCA,
    Proxies,
    Upstream,
    ask,
    mapped,
    open_tunnel,
    read_all,
    tls_through,
    wait_events,
)


def _get(host: str, port: int, path: str = "/hello") -> bytes:
    return (f"GET http://{host}:{port}{path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Connection: close\r\n\r\n").encode()  # fmt: skip


def test_connect_to_a_denied_host(proxies: Proxies, http_upstream: Upstream) -> None:
    port = http_upstream.port
    proxy = proxies(mapped("*.lan.test", f"evil.lan.test:{port}", deny=("evil.lan.test",),
                           **{"evil.lan.test": "127.0.0.1"}))  # fmt: skip
    _, reply = open_tunnel(proxy.socket_path, "evil.lan.test", port)
    assert reply.status == 403
    assert "denied by the deny entry 'evil.lan.test'" in reply.headers["x-jarvis-refused"]
    [event] = wait_events(proxy, 1)
    assert (event.host, event.allowed, event.address) == ("evil.lan.test", False, None)
    assert "deny entry" in event.reason


@pytest.mark.parametrize(
    "literal", ["127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "169.254.169.254", "127.1",
                "2130706433", "0x7f.1"],
)  # fmt: skip
def test_an_ip_literal_is_refused(proxies: Proxies, http_upstream: Upstream, literal: str) -> None:
    # The upstream itself is allowed by name: only its address is refused.
    proxy = proxies(mapped(f"upstream.test:{http_upstream.port}"))
    _, tunnel = open_tunnel(proxy.socket_path, literal, http_upstream.port)
    plain = ask(proxy.socket_path, _get(literal, http_upstream.port))
    assert tunnel.status == plain.status == 403, (tunnel, plain)
    events = wait_events(proxy, 2)
    assert [e.allowed for e in events] == [False, False]
    assert all(e.address is None for e in events)
    assert {e.method for e in events} == {"CONNECT", "GET"}


def test_a_name_the_resolver_maps_to_loopback_is_refused_even_when_allowed(
    proxies: Proxies, http_upstream: Upstream
) -> None:
    # "localhost" is resolved by the system resolver (/etc/hosts), as a rebinding
    # DNS answer would be: an exact entry does not make loopback reachable by name.
    port = http_upstream.port
    proxy = proxies(mapped(f"localhost:{port}"))
    reply = ask(proxy.socket_path, _get("localhost", port))
    assert reply.status == 403
    assert "loopback address" in reply.headers["x-jarvis-refused"]
    _, tunnel = open_tunnel(proxy.socket_path, "localhost", port)
    assert tunnel.status == 403
    events = wait_events(proxy, 2)
    assert [e.allowed for e in events] == [False, False]
    assert all("resolves to" in e.reason and "loopback" in e.reason for e in events)


def test_a_name_mapped_to_the_metadata_address_is_never_reached(proxies: Proxies) -> None:
    # Even an exact entry whose hosts mapping names 169.254.169.254: never.
    proxy = proxies(mapped("meta.test", "*.lan.test",
                           **{"meta.test": "169.254.169.254", "m.lan.test": "169.254.169.254"}))  # fmt: skip
    for host in ("meta.test", "m.lan.test"):
        reply = ask(proxy.socket_path, _get(host, 80, "/latest/meta-data/"))
        assert reply.status == 403
        assert "169.254.169.254 is a metadata address" in reply.headers["x-jarvis-refused"]
    events = wait_events(proxy, 2)
    assert [e.allowed for e in events] == [False, False]


def test_a_wildcard_never_reaches_a_private_address(
    proxies: Proxies, http_upstream: Upstream
) -> None:
    port = http_upstream.port
    proxy = proxies(mapped(f"*.lan.test:{port}", **{"sneaky.lan.test": "127.0.0.1"}))
    reply = ask(proxy.socket_path, _get("sneaky.lan.test", port))
    assert reply.status == 403
    assert "wildcard entry" in reply.headers["x-jarvis-refused"]
    _, tunnel = open_tunnel(proxy.socket_path, "sneaky.lan.test", port)
    assert tunnel.status == 403
    events = wait_events(proxy, 2)
    assert all(not e.allowed and "wildcard" in e.reason for e in events)


@pytest.mark.parametrize("to", ["http://169.254.169.254/latest/meta-data/",
                                "http://127.0.0.1:{port}/hello", "http://localhost:{port}/hello"])  # fmt: skip
def test_a_redirect_from_an_allowed_host_to_a_private_address(
    proxies: Proxies, http_upstream: Upstream, to: str
) -> None:
    port = http_upstream.port
    proxy = proxies(mapped(f"upstream.test:{port}", f"localhost:{port}"))
    target = to.format(port=port)
    with Forwarder(proxy.socket_path) as fwd:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": fwd.url}))
        with pytest.raises(urllib.error.HTTPError) as info:  # the client follows it...
            opener.open(f"http://upstream.test:{port}/redirect?to={target}", timeout=20)
        assert info.value.code == 403  # ...and the proxy refuses where it leads
        assert info.value.headers["X-Jarvis-Refused"]
        info.value.close()
    events = wait_events(proxy, 2)
    assert events[0].allowed and events[0].host == "upstream.test"
    assert not events[1].allowed and events[1].address is None


def test_a_host_header_for_another_host_inside_an_allowed_tunnel(
    proxies: Proxies, http_upstream: Upstream
) -> None:
    port = http_upstream.port
    proxy = proxies(mapped(f"upstream.test:{port}"))
    smuggled = [
        b"GET /hello HTTP/1.1\r\nHost: evil.example\r\n\r\n",
        b"\r\nGET /hello HTTP/1.1\r\nHost: evil.example\r\n\r\n",  # leading empty line
        b" \r\n\tGET /hello HTTP/1.1\r\nHost: evil.example\r\n\r\n",  # and spaces
        b"get /hello http/1.1\r\nHost: evil.example\r\n\r\n",  # lower case
        b"GET /\xff HTTP/1.1\r\nHost: evil.example\r\n\r\n",  # a byte h11 refuses
        b"GET http://evil.example/hello HTTP/1.1\r\nHost: upstream.test\r\n\r\n",  # absolute
        b"GET /hello HTTP/1.1\r\nHost: upstream.test\r\nHost: evil.example\r\n\r\n",
        # a body an upstream could frame otherwise, hiding a request for another host
        b"POST /echo HTTP/1.1\r\nHost: upstream.test\r\nContent-Length: 4\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n2c\r\nGET /hello HTTP/1.1\r\nHost: evil.example\r\n\r\n"
        b"\r\n0\r\n\r\n",
        # allowed first, then another host on the same (keep-alive) connection
        b"GET /hello HTTP/1.1\r\nHost: upstream.test\r\n\r\n"
        b"GET /hello HTTP/1.1\r\nHost: evil.example\r\n\r\n",
        # ... or then one naming no host (the front's default site)
        b"GET /hello HTTP/1.1\r\nHost: upstream.test\r\n\r\nGET /hello HTTP/1.0\r\n\r\n",
    ]
    for request in smuggled:
        sock, reply = open_tunnel(proxy.socket_path, "upstream.test", port)
        assert reply.status == 200
        with sock:
            sock.sendall(request)
            answer = read_all(sock)
        # 403 for a Host it reads; 400 for what it cannot read as one request
        assert answer.startswith((b"HTTP/1.1 403", b"HTTP/1.1 400")) or (
            b"HTTP/1.1 200" in answer and (b"HTTP/1.1 403" in answer or b"HTTP/1.1 400" in answer)
        ), (request, answer)
        assert b"X-Jarvis-Refused" in answer
        assert answer.count(b"hello; Host=") <= 1
        assert b"Host=evil" not in answer
    events = wait_events(proxy, len(smuggled) + 2)
    refused = [e for e in events if not e.allowed]
    assert len(refused) == len(smuggled)
    assert all(e.host == "upstream.test" and e.reason for e in refused)
    # the keep-alive ones: the connection served a request, then one was refused
    assert [e.method for e in refused].count("GET") == 2


def test_a_tls_server_name_for_another_host_inside_an_allowed_tunnel(
    proxies: Proxies, https_upstream: Upstream, test_ca: LocalCA
) -> None:
    port = https_upstream.port
    proxy = proxies(mapped(f"upstream.test:{port}"))
    sock, reply = open_tunnel(proxy.socket_path, "upstream.test", port)
    assert reply.status == 200
    with sock, pytest.raises((ssl.SSLError, OSError)):
        # The certificate is valid for other.test too: only the proxy stops this.
        tls_through(sock, test_ca.client(), "other.test")(b"GET /hello HTTP/1.1\r\n\r\n")
    [event] = wait_events(proxy, 1)
    assert not event.allowed and "domain fronting" in event.reason
    assert "'other.test'" in event.reason
    # The same tunnel with the matching name works.
    sock, _ = open_tunnel(proxy.socket_path, "upstream.test", port)
    with sock:
        answer = tls_through(sock, test_ca.client(), "upstream.test")(
            b"GET /hello HTTP/1.1\r\nHost: upstream.test\r\nConnection: close\r\n\r\n"
        )
    assert b"hello; Host=upstream.test" in answer


def test_plain_http_keep_alive_cannot_move_to_another_host(
    proxies: Proxies, http_upstream: Upstream
) -> None:
    port = http_upstream.port
    proxy = proxies(mapped(f"upstream.test:{port}", f"other.test:{port}"))
    # Both allowed, but a connection serves one upstream: the second request (on the
    # same client connection) would otherwise ride the first one's upstream.
    first = _get("upstream.test", port).replace(b"Connection: close\r\n", b"")
    reply = ask(proxy.socket_path, first + _get("other.test", port))
    assert reply.status == 200
    assert b"HTTP/1.1 403" in reply.body
    assert b"one upstream per connection" in reply.body
    assert reply.body.count(b"hello; Host=") == 1
    # a second request naming no valid host at all: refused the same way
    odd = ask(proxy.socket_path, first + b"GET http://bad!host/ HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"HTTP/1.1 403" in odd.body and b"bad!host" in odd.body
    events = wait_events(proxy, 4)
    assert not [e for e in events if e.reason.startswith("internal error")]
    events = events[:2]
    refused = [e for e in events if not e.allowed]
    assert [(e.host, e.method) for e in refused] == [("other.test", "GET")]
    [served] = [e for e in events if e.allowed]
    assert served.host == "upstream.test" and "then refused" in served.reason


@pytest.mark.parametrize(
    ("entry", "answer", "words"),
    [
        ("rebind.dns.example", ["169.254.169.254"], "metadata address"),
        ("rebind.dns.example", ["127.0.0.1", "::1"], "loopback address"),
        ("rebind.dns.example", ["::ffff:127.0.0.1"], "loopback address"),
        ("rebind.dns.example", ["64:ff9b::a9fe:a9fe"], "metadata address"),
        ("*.dns.example", ["10.1.2.3"], "wildcard entry"),
        ("*.dns.example", ["fd00::1"], "wildcard entry"),
    ],
)
def test_a_dns_answer_pointing_inside_is_refused(
    proxies: Proxies, monkeypatch: pytest.MonkeyPatch, entry: str, answer: list[str], words: str
) -> None:
    # The system resolver's answer, as a rebinding DNS server would give it.
    def resolve(host: object, port: object, *args: object, **kwargs: object) -> list[object]:
        assert host == "rebind.dns.example"  # only allowed names are ever resolved
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
             (a, port, 0, 0) if ":" in a else (a, port))
            for a in answer
        ]  # fmt: skip

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    proxy = proxies(NetPolicy.parse(allow=[entry]))
    _, reply = open_tunnel(proxy.socket_path, "rebind.dns.example", 443)
    assert reply.status == 403
    assert words in reply.headers["x-jarvis-refused"]
    _, other = open_tunnel(proxy.socket_path, "other.test", 443)  # never resolved
    assert other.status == 403
    events = wait_events(proxy, 2)
    assert [e.allowed for e in events] == [False, False]
