"""jarvisd.testing.refuse_network: loopback works, anything else is refused loudly."""

from __future__ import annotations

import asyncio
import socket

import httpx
import ollama
import pytest

from jarvisd import Message
from jarvisd.engines import OllamaEngine, ScriptedEngine, reply
from jarvisd.testing import NetworkRefused, OllamaStandIn, refuse_network

ELSEWHERE = "http://192.0.2.1:11434"  # TEST-NET-1: never reached, refused before connecting


def test_loopback_servers_still_answer() -> None:
    with refuse_network(), OllamaStandIn(ScriptedEngine([reply("hi")])) as standin:
        client = ollama.Client(host=standin.url, timeout=5)
        assert client.chat(model="scripted", messages=[{"role": "user", "content": "x"}]).message
        assert client.list().models
        client._client.close()
        assert httpx.get(f"http://localhost:{standin.url.rsplit(':', 1)[1]}/").text


def test_other_hosts_are_refused_sync_and_async() -> None:
    with refuse_network():
        with pytest.raises(NetworkRefused, match=r"192\.0\.2\.1"):
            httpx.get(ELSEWHERE, timeout=1)
        with pytest.raises(NetworkRefused, match=r"example\.com"):
            socket.getaddrinfo("example.com", 443)
        with pytest.raises(NetworkRefused), socket.socket() as sock:
            sock.connect_ex(("192.0.2.1", 80))

        async def through_an_engine() -> None:
            engine = OllamaEngine(ELSEWHERE, model="m", timeout=1)
            try:
                await engine.generate([Message.user("x")])
            finally:
                await engine.aclose()

        # Not translated into EngineUnavailable: a test cannot mistake it for "down"
        # (anyio's happy-eyeballs connect wraps it in an ExceptionGroup).
        with pytest.raises(Exception) as info:
            asyncio.run(through_an_engine())
        assert isinstance(info.value, NetworkRefused) or info.group_contains(NetworkRefused)


def test_nesting_and_restoring() -> None:
    before = (socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo)
    with refuse_network():
        inside = socket.socket.connect
        with refuse_network():
            assert socket.socket.connect is inside
        assert socket.socket.connect is inside
    assert (socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo) == before
