"""Connections without the token cannot starve the agent's own requests: 64 clients
that open a connection and never finish their request head (no token sent), then the
agent's request, which is served. On TCP (an agent run with --no-sandbox: any local
account can connect) and on the sandbox's Unix socket."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.gateway import Gateway
from jarvisd.http import _server as _http

STALLERS = 64
PARTIAL_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def _stall(gw: Gateway, socket_path: Path | None) -> list[asyncio.StreamWriter]:
    writers = []
    for i in range(STALLERS):
        if socket_path is not None:
            _, writer = await asyncio.open_unix_connection(str(socket_path))
        else:
            assert gw.url is not None
            port = int(gw.url.rsplit(":", 1)[1])
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        if i % 2:  # half send part of a head, half nothing at all
            writer.write(PARTIAL_HEAD)
            await writer.drain()
        writers.append(writer)
    await asyncio.sleep(0.5)  # let the gateway accept them all before the agent asks
    return writers


async def _agent_asks(gw: Gateway, socket_path: Path | None) -> httpx.Response:
    auth = {"Authorization": f"Bearer {gw.token}"}
    if socket_path is not None:
        transport = httpx.AsyncHTTPTransport(uds=str(socket_path))
        client = httpx.AsyncClient(transport=transport, base_url="http://gw", headers=auth)
    else:
        assert gw.url is not None
        client = httpx.AsyncClient(base_url=gw.url, headers=auth)
    async with client:
        return await client.post("/v1/chat/completions", json=CHAT, timeout=60)


@pytest.mark.parametrize("over", ["tcp", "unix"])
def test_stalling_connections_without_the_token_do_not_starve_the_agent(
    over: str, tmp_path: Path
) -> None:
    socket_path = tmp_path / "gw.sock" if over == "unix" else None

    async def go() -> None:
        engine = ScriptedEngine([reply("served")])
        async with Gateway(engine, RunContext(), socket_path=socket_path) as gw:
            writers = await _stall(gw, socket_path)
            try:
                answer = await _agent_asks(gw, socket_path)
                assert answer.status_code == 200, answer.text
                assert answer.json()["choices"][0]["message"]["content"] == "served"
            finally:
                for writer in writers:
                    writer.close()

    asyncio.run(go())


def test_an_admitted_connection_keeps_the_long_head_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_http, "FIRST_HEAD_TIMEOUT", 0.2)

    async def go() -> None:
        engine = ScriptedEngine([reply("one"), reply("two")])
        async with Gateway(engine, RunContext()) as gw:
            assert gw.url is not None
            auth = {"Authorization": f"Bearer {gw.token}"}
            limits = httpx.Limits(max_connections=1)
            async with httpx.AsyncClient(base_url=gw.url, headers=auth, limits=limits) as http:
                first = await http.post("/v1/chat/completions", json=CHAT)
                await asyncio.sleep(1.0)  # well past the first head's limit, kept alive
                second = await http.post("/v1/chat/completions", json=CHAT)
                assert [first.status_code, second.status_code] == [200, 200]
                assert first.extensions["network_stream"] is second.extensions["network_stream"]

    asyncio.run(go())
