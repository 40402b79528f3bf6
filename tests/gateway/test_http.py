"""The gateway's HTTP layer against hostile clients: sizes bounded before reading, slow
clients dropped, the token checked before a body is read, a vanished client stops its
generation, and nothing is left behind."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.gateway import Gateway
from jarvisd.http import _server as _http

from .conftest import StallingEngine, serve


async def exchange(gw: Gateway, data: bytes, *, eof: bool = False) -> bytes:
    """Send ``data`` (and no more), then read until the server closes."""
    assert gw.url is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))
    writer.write(data)
    if eof:
        writer.write_eof()
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()


def head(gw: Gateway, extra: str = "", *, token: bool = True) -> bytes:
    auth = f"Authorization: Bearer {gw.token}\r\n" if token else ""
    return f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{auth}{extra}\r\n".encode()


def test_an_oversized_body_is_refused_before_it_is_sent() -> None:
    async def body(gw: Gateway) -> None:
        # The body never comes: an answer proves nothing waited for it.
        out = await exchange(gw, head(gw, f"Content-Length: {_http.MAX_BODY + 1}\r\n"))
        assert out.startswith(b"HTTP/1.1 413 ")
        assert b"invalid_request_error" in out

    serve(ScriptedEngine([]), body)


def test_without_the_token_the_body_is_never_read() -> None:
    async def body(gw: Gateway) -> None:
        out = await exchange(gw, head(gw, "Content-Length: 1000\r\n", token=False))
        assert out.startswith(b"HTTP/1.1 401 ") and b"connection: close" in out.lower()

    serve(ScriptedEngine([]), body)


def test_a_chunked_body_is_cut_off_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "MAX_BODY", 1000)

    async def body(gw: Gateway) -> None:
        chunk = b"400\r\n" + b"x" * 0x400 + b"\r\n"
        out = await exchange(gw, head(gw, "Transfer-Encoding: chunked\r\n") + chunk * 3)
        assert out.startswith(b"HTTP/1.1 413 ")

    serve(ScriptedEngine([]), body)


def test_a_slow_client_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "HEAD_TIMEOUT", 0.2)
    monkeypatch.setattr(_http, "BODY_TIMEOUT", 0.2)

    async def body(gw: Gateway) -> None:
        out = await exchange(gw, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        assert out.startswith(b"HTTP/1.1 408 ")
        out = await exchange(gw, head(gw, "Content-Length: 10\r\n") + b"{")
        assert out.startswith(b"HTTP/1.1 408 ")
        assert await exchange(gw, b"") == b""  # idle: closed without a word

    serve(ScriptedEngine([]), body)


def test_too_many_or_too_long_headers_are_refused() -> None:
    async def body(gw: Gateway) -> None:
        many = "".join(f"x-{i}: y\r\n" for i in range(_http.MAX_HEADERS + 1))
        assert (await exchange(gw, head(gw, many))).startswith(b"HTTP/1.1 431 ")
        long = "x-long: " + "y" * (_http.MAX_HEAD + 10) + "\r\n"
        out = await exchange(gw, head(gw, long))
        assert out.startswith((b"HTTP/1.1 431 ", b"HTTP/1.1 400 "))

    serve(ScriptedEngine([]), body)


def test_requests_share_a_kept_alive_connection_and_unknown_paths_are_404() -> None:
    engine = ScriptedEngine([reply("one"), reply("two")])

    async def body(gw: Gateway) -> None:
        assert gw.url is not None
        auth = {"Authorization": f"Bearer {gw.token}"}
        async with httpx.AsyncClient(base_url=gw.url, headers=auth) as http:
            for expected in ("one", "two"):
                r = await http.post("/v1/chat/completions",
                                    json={"messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
                assert r.json()["choices"][0]["message"]["content"] == expected
            r = await http.post("/v2/nothing", json={})
            assert r.status_code == 404 and r.json()["error"]["message"]
            r = await http.delete("/v1/messages")
            assert r.status_code == 405 and r.json()["type"] == "error"
            r = await http.post("/v1/messages", content=b"{not json")
            assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]

    serve(engine, body)


def test_a_client_that_goes_away_stops_its_generation() -> None:
    engine = StallingEngine()
    run = RunContext()

    async def body(gw: Gateway) -> None:
        request = head(gw, "Content-Type: application/json\r\nContent-Length: {n}\r\n")
        payload = b'{"stream": true, "messages": [{"role": "user", "content": "hi"}]}'
        request = request.replace(b"{n}", str(len(payload)).encode())
        assert gw.url is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))
        writer.write(request + payload)
        assert b"hello" in await reader.readuntil(b"hello")
        writer.close()
        for _ in range(300):  # the next write finds the client gone
            if engine.closed:
                break
            await asyncio.sleep(0.05)
        assert engine.closed

    serve(engine, body, run=run)


def test_closing_the_gateway_ends_inflight_streams() -> None:
    engine = StallingEngine()

    async def go() -> None:
        async with Gateway(engine, RunContext()) as gw:
            assert gw.url is not None
            client = httpx.AsyncClient(base_url=gw.url, headers={"x-api-key": gw.token})
            request = client.build_request(
                "POST", "/v1/messages",
                json={"stream": True, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
            )  # fmt: skip
            response = await client.send(request, stream=True)
            await engine.started.wait()
        assert engine.closed
        await response.aclose()
        await client.aclose()

    asyncio.run(go())


def test_a_kept_alive_connection_serves_the_next_request_after_a_slow_reply() -> None:
    """While a reply is made, a watcher reads the client (to notice it leave); the next
    request on the connection is read only once that watcher has stopped reading (two
    readers at once: the connection died with "read() called while another coroutine
    is already waiting"). A raw client: httpx would quietly reconnect."""
    engine = ScriptedEngine([reply("one"), reply("two"), reply("three")], latency_s=0.05)
    body = b'{"messages": [{"role": "user", "content": "hi"}]}'

    async def talk(gw: Gateway) -> list[str]:
        assert gw.url is not None
        host, port = gw.url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        request = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {gw.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        answers = []
        try:
            for _ in range(3):
                writer.write(request)
                await writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                reply_ = json.loads(await reader.readexactly(length))
                answers.append(reply_["choices"][0]["message"]["content"])
        finally:
            writer.close()
        return answers

    assert serve(engine, talk) == ["one", "two", "three"]
