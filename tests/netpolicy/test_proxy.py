"""The egress proxy against real upstreams on loopback: plain HTTP and HTTPS through
it work for allowed hosts and are events; its socket is private."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from jarvisd._errors import UsageError
from jarvisd.gateway._peer import PeerBinding
from jarvisd.netpolicy import EgressProxy, NetEvent, NetLimits, NetPolicy

from .conftest import (
    Forwarder,
    LocalCA,
    Proxies,
    Upstream,
    ask,
    mapped,
    open_tunnel,
    raw_tunnel,
    read_all,
    unix,
    wait_events,
)


def test_plain_http_to_an_allowed_host(proxies: Proxies, http_upstream: Upstream) -> None:
    port = http_upstream.port
    proxy = proxies(mapped(f"upstream.test:{port}"))
    reply = ask(proxy.socket_path, f"GET http://upstream.test:{port}/hello HTTP/1.1\r\n"
                f"Host: upstream.test:{port}\r\nConnection: close\r\n\r\n".encode())  # fmt: skip
    assert reply.status == 200
    assert reply.body == f"hello; Host=upstream.test:{port}".encode()
    [event] = wait_events(proxy, 1)
    assert (event.host, event.port, event.address, event.allowed, event.method) == (
        "upstream.test", port, "127.0.0.1", True, "GET")  # fmt: skip
    assert event.bytes_up > 0 and event.bytes_down > len(reply.body)
    assert event.duration >= 0 and event.started > 0
    assert event.to_dict()["reason"] == f"allowed by 'upstream.test:{port}'"


def test_keep_alive_to_the_same_host_and_a_request_body(
    proxies: Proxies, http_upstream: Upstream
) -> None:
    port = http_upstream.port
    proxy = proxies(mapped(f"upstream.test:{port}"))
    with (
        Forwarder(proxy.socket_path) as fwd,
        httpx.Client(proxy=fwd.url, trust_env=False) as client,
    ):
        first = client.get(f"http://upstream.test:{port}/hello")
        second = client.post(f"http://upstream.test:{port}/echo", content=b"x" * 100_000)
    assert first.status_code == 200 and first.text.startswith("hello")
    assert second.status_code == 200 and second.content == b"echo:" + b"x" * 100_000
    [event] = wait_events(proxy, 1)  # one connection, two requests
    assert event.allowed and event.bytes_up > 100_000


@pytest.mark.parametrize("kernel", [True, False], ids=["splice", "transports"])
def test_https_through_connect_with_a_test_ca(
    proxies: Proxies,
    https_upstream: Upstream,
    test_ca: LocalCA,
    kernel: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not kernel:  # the relay platforms without splice(2) use
        monkeypatch.delattr(os, "splice", raising=False)
    port = https_upstream.port
    proxy = proxies(mapped(f"upstream.test:{port}"))
    with (
        Forwarder(proxy.socket_path) as fwd,
        httpx.Client(proxy=fwd.url, verify=test_ca.client(), trust_env=False) as client,
    ):
        reply = client.get(f"https://upstream.test:{port}/bytes?n=300000")
    assert reply.status_code == 200 and len(reply.content) == 300_000
    [event] = wait_events(proxy, 1)
    assert (event.method, event.allowed, event.address) == ("CONNECT", True, "127.0.0.1")
    assert event.bytes_down > 300_000


def test_an_exact_entry_naming_a_private_address_allows_exactly_it(
    proxies: Proxies, http_upstream: Upstream
) -> None:
    port = http_upstream.port
    proxy = proxies(NetPolicy.parse(allow=[f"127.0.0.1:{port}"]))
    sock, reply = open_tunnel(proxy.socket_path, "127.0.0.1", port)
    assert reply.status == 200
    with sock:
        sock.sendall(b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert b"hello; Host=127.0.0.1" in read_all(sock)
    _, other = open_tunnel(proxy.socket_path, "127.0.0.1", port + 1 if port < 65535 else 1)
    assert other.status == 403


def test_the_socket_is_private_never_reused_and_removed(tmp_path: Path) -> None:
    path = tmp_path / "egress.sock"
    proxy = EgressProxy(NetPolicy(), path).start()
    try:
        mode = os.lstat(path).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        with pytest.raises(UsageError, match="something is already there"):
            EgressProxy(NetPolicy(), path).start()
    finally:
        proxy.stop()
    assert not path.exists()
    proxy.stop()  # idempotent
    (tmp_path / "taken").write_text("")
    with pytest.raises(UsageError, match="already there"):
        EgressProxy(NetPolicy(), tmp_path / "taken").start()
    assert (tmp_path / "taken").read_text() == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_the_socket_is_handed_to_the_sandbox_uid(tmp_path: Path) -> None:
    with EgressProxy(NetPolicy(), tmp_path / "s.sock", owner_uid=10001) as proxy:
        info = os.lstat(proxy.socket_path)
        assert info.st_uid == 10001 and stat.S_IMODE(info.st_mode) == 0o600


def test_an_empty_policy_refuses_everything_with_events(proxies: Proxies) -> None:
    proxy = proxies(NetPolicy())
    reply = ask(
        proxy.socket_path, b"GET http://pypi.org/simple/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n"
    )
    assert reply.status == 403
    assert reply.headers["x-jarvis-refused"] == "pypi.org:80: not in the allowlist"
    assert "--allow-net pypi.org" in reply.body.decode()
    assert '[sandbox.network] allow = ["pypi.org"]' in reply.body.decode()
    [event] = wait_events(proxy, 1)
    assert not event.allowed and event.reason == "not in the allowlist"


def test_a_server_that_speaks_first_is_relayed(proxies: Proxies) -> None:
    with raw_tunnel(proxies) as (proxy, sock, server):
        port = server.getsockname()[1]
        server.sendall(b"220 smtp.example ESMTP\r\n")  # before the client says anything
        assert sock.recv(100) == b"220 smtp.example ESMTP\r\n"
        sock.sendall(b"QUIT\r\n")
        assert server.recv(100) == b"QUIT\r\n"
        sock.shutdown(socket.SHUT_WR)
        assert server.recv(100) == b""  # the half-close crosses the proxy
        server.sendall(b"221 bye\r\n")
        server.close()
        assert read_all(sock) == b"221 bye\r\n"
    [event] = wait_events(proxy, 1)
    assert event.allowed and event.reason == f"allowed by '127.0.0.1:{port}'"
    assert (event.bytes_up, event.bytes_down) == (6, 24 + 9)


def test_ipv6_upstream_by_bracketed_literal(proxies: Proxies) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    with raw_tunnel(proxies, "::1") as (proxy, sock, server):
        sock.sendall(b"SSH-2.0-x\r\n")
        assert server.recv(100) == b"SSH-2.0-x\r\n"
    [event] = wait_events(proxy, 1)
    assert event.allowed and event.address == "::1" and event.host == "::1"


def test_events_keep_the_newest(proxies: Proxies) -> None:
    proxy = proxies(NetPolicy(), limits=NetLimits(max_events=2))
    for host in ("a.example", "b.example", "c.example"):
        ask(proxy.socket_path, f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    wait_events(proxy, 2)
    assert len(proxies.seen) == 3  # on_event saw every one
    assert [e.host for e in proxy.events] == ["b.example", "c.example"]


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare"
)
def test_a_peer_binding_serves_only_the_bound_pid_namespace(tmp_path: Path) -> None:
    # Bound to a process in another pid namespace (as a container's init is), this
    # test process is not admitted, whatever it sends.
    other = subprocess.Popen(["unshare", "--pid", "--fork", "sleep", "60"])
    try:
        child = 0
        for _ in range(200):
            children = Path(f"/proc/{other.pid}/task/{other.pid}/children").read_text().split()
            if children:
                child = int(children[0])
                break
            time.sleep(0.02)
        assert child
        seen: list[NetEvent] = []
        with EgressProxy(NetPolicy(), tmp_path / "bound.sock", on_event=seen.append,
                         peers=PeerBinding()) as proxy:  # fmt: skip
            proxy.bind_peer(child)
            reply = ask(proxy.socket_path, b"CONNECT a.example:443 HTTP/1.1\r\nHost: a\r\n\r\n")
            assert reply.status == 0  # closed without a word
            wait_events(proxy, 1)
            proxy.bind_peer(os.getpid())
            reply = ask(proxy.socket_path, b"CONNECT a.example:443 HTTP/1.1\r\nHost: a\r\n\r\n")
            assert reply.status == 403
            events = wait_events(proxy, 2)
        assert events[0].reason == "a peer outside the run's sandbox" and not events[0].allowed
        assert events[1].reason == "not in the allowlist"
    finally:
        other.kill()
        other.wait()


def test_stop_closes_open_tunnels_each_with_one_event(
    proxies: Proxies, http_upstream: Upstream
) -> None:
    port = http_upstream.port
    proxy = proxies(mapped(f"upstream.test:{port}"))
    tunnels = [open_tunnel(proxy.socket_path, "upstream.test", port)[0] for _ in range(3)]
    silent = unix(proxy.socket_path)  # no request yet
    proxy.stop()
    for sock in [*tunnels, silent]:
        with sock:
            assert read_all(sock) == b""
    events = proxy.events
    assert len(events) == 4 and len(proxies.seen) == 4
    assert sum(e.allowed for e in events) == 3
    assert all(e.reason.endswith("the proxy stopped") for e in events)
    assert not proxy.socket_path.exists()


def test_a_failing_on_event_does_not_break_the_proxy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: NetEvent) -> None:
        raise RuntimeError("reporting failed")

    with EgressProxy(NetPolicy(), tmp_path / "e.sock", on_event=broken) as proxy:
        for _ in range(2):
            reply = ask(proxy.socket_path, b"CONNECT a.example:443 HTTP/1.1\r\nHost: a\r\n\r\n")
            assert reply.status == 403
        assert len(wait_events(proxy, 2)) == 2
    assert "on_event failed" in caplog.text


@pytest.mark.parametrize("field", ["max_connections", "max_head_bytes", "idle_timeout"])
def test_limits_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError, match=f"NetLimits.{field} must be positive"):
        NetLimits(**{field: 0})


@pytest.mark.parametrize(
    "first",
    [b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", b"0032git-upload-pack /project.git\0host=x\0",
     b"PING\r\n", b"\x00\x00\x00\x08\x04\xd2\x16\x2f"],
)  # fmt: skip
def test_other_protocols_than_tls_and_http_are_relayed_as_bytes(
    proxies: Proxies, first: bytes
) -> None:
    with raw_tunnel(proxies) as (proxy, sock, server):
        sock.sendall(first)
        got = b""
        while len(got) < len(first):
            got += server.recv(100)
        assert got == first
    [event] = wait_events(proxy, 1)
    assert event.allowed
