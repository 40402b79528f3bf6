"""Random and mutated requests: each gets an answer or a close, each is one event,
none is an internal error, and the proxy still serves a good request afterwards."""

from __future__ import annotations

import random
import socket
import time

from .conftest import (
    Proxies,
    Upstream,
    mapped,
    open_tunnel,
    parse_reply,
    read_all,
    unix,
    wait_events,
)

SEEDS = 120


def _samples(port: int) -> list[bytes]:
    return [
        f"GET http://upstream.test:{port}/hello HTTP/1.1\r\nHost: upstream.test:{port}\r\n\r\n".encode(),
        f"CONNECT upstream.test:{port} HTTP/1.1\r\nHost: upstream.test\r\n\r\n"
        "GET /hello HTTP/1.1\r\nHost: upstream.test\r\n\r\n".encode(),
        f"POST http://upstream.test:{port}/echo HTTP/1.1\r\nHost: upstream.test:{port}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".encode(),
        f"CONNECT upstream.test:{port} HTTP/1.1\r\n\r\n\x16\x03\x01\x00\x05\x01\x00\x00\x01\x03".encode(),
    ]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(4)
        at = rng.randrange(len(out) + 1)
        if op == 0 and out:
            out[min(at, len(out) - 1)] = rng.randrange(256)
        elif op == 1:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2 and out:
            del out[at : at + rng.randint(1, 8)]
        else:
            out[at:at] = rng.choice([b"\r\n", b":", b" ", b"\x00", b"[", b"]", b"%", b"*."])
    return bytes(out)


def test_mutated_requests_are_answered_and_reported(
    proxies: Proxies, http_upstream: Upstream
) -> None:
    port = http_upstream.port
    proxy = proxies(mapped(f"upstream.test:{port}", "*.lan.test"))
    rng = random.Random(31)
    samples = _samples(port)
    for i in range(SEEDS):
        data = _mutate(rng, rng.choice(samples)) if i % 4 else rng.randbytes(rng.randint(1, 200))
        with unix(proxy.socket_path) as sock:
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the proxy may answer and close before reading it all
            answer = read_all(sock)
        if answer:
            assert answer.startswith(b"HTTP/1.1 "), (data, answer[:200])
    wait_events(proxy, min(SEEDS, proxy.limits.max_events))
    for _ in range(1000):  # on_event sees every one (events keeps the newest)
        if len(proxies.seen) >= SEEDS:
            break
        time.sleep(0.02)
    assert len(proxies.seen) == SEEDS
    assert not [e for e in proxies.seen if e.reason.startswith("internal error")]
    # and it still serves
    sock, reply = open_tunnel(proxy.socket_path, "upstream.test", port)
    assert reply.status == 200
    with sock:
        sock.sendall(b"GET /hello HTTP/1.1\r\nHost: upstream.test\r\nConnection: close\r\n\r\n")
        assert parse_reply(read_all(sock)).status == 200
