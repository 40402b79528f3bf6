"""The Ollama engine (official client) against the protocol-faithful stand-in."""

from __future__ import annotations

import asyncio

import ollama
import pytest

from jarvisd import EngineResponseError, EngineUnavailable, Message, ModelNotFound, ToolSpec
from jarvisd.engines import OllamaEngine, ScriptedEngine, reply
from jarvisd.testing import OllamaStandIn

CALC = ToolSpec(
    "calculator",
    "Evaluate arithmetic.",
    {"type": "object", "properties": {"expression": {"type": "string"}}},
)


def test_generate_stream_tools_and_num_ctx() -> None:
    engine = ScriptedEngine(
        [
            reply("Paris is the capital."),
            reply("", ("calculator", {"expression": "6*7"})),
            reply("one two three"),
        ],
        context_window=12345,
    )

    async def go(url: str) -> None:
        client = OllamaEngine(url, model="scripted", timeout=5)
        g = await client.generate([Message.user("capital of France?")])
        assert g.content == "Paris is the capital." and g.usage.completion_tokens > 0
        g = await client.generate([Message.user("6*7?")], tools=[CALC])
        assert [(c.name, c.arguments_dict()) for c in g.tool_calls] == [
            ("calculator", {"expression": "6*7"})
        ]
        assert g.finish_reason.value == "tool_calls"
        deltas = []
        async for chunk in client.stream([Message.user("count")]):
            deltas.append(chunk.delta)
            if chunk.done:
                assert chunk.generation is not None and chunk.generation.content == "one two three"
        assert "".join(deltas) == "one two three"
        await client.aclose()

    with OllamaStandIn(engine) as standin:
        asyncio.run(go(standin.url))
        chats = [body for method, path, body in standin.requests if path == "/api/chat"]
    # num_ctx comes from the model's real context length (/api/show), not Ollama's default.
    assert all(body["options"]["num_ctx"] == 12345 for body in chats)
    assert chats[1]["tools"][0]["function"]["name"] == "calculator"
    # Tool results go back the way Ollama expects them.
    assert engine.calls[0].messages[0].content == "capital of France?"


def test_num_ctx_is_capped_by_max_context() -> None:
    engine = ScriptedEngine([reply("ok")], context_window=131072)

    async def go(url: str) -> int | None:
        client = OllamaEngine(url, model="scripted", timeout=5, max_context=8192)
        await client.generate([Message.user("hi")])
        length = await client.context_length()
        await client.aclose()
        return length

    with OllamaStandIn(engine) as standin:
        assert asyncio.run(go(standin.url)) == 8192  # what the agents fit history to
        chats = [body for method, path, body in standin.requests if path == "/api/chat"]
    assert chats[0]["options"]["num_ctx"] == 8192


def test_errors_are_translated() -> None:
    engine = ScriptedEngine([EngineResponseError("model exploded", 500)])

    async def go(url: str) -> None:
        client = OllamaEngine(url, model="scripted", timeout=5)
        with pytest.raises(EngineResponseError, match="model exploded"):
            await client.generate([Message.user("x")])
        await client.aclose()
        missing = OllamaEngine(url, model="nope", timeout=5)
        with pytest.raises(ModelNotFound, match="ollama pull nope"):
            await missing.generate([Message.user("x")])
        await missing.aclose()

    with OllamaStandIn(engine) as standin:
        asyncio.run(go(standin.url))


def test_unreachable_is_engine_unavailable() -> None:
    async def go() -> None:
        client = OllamaEngine("http://127.0.0.1:9", model="m", connect_timeout=0.5)
        with pytest.raises(EngineUnavailable, match="cannot reach Ollama"):
            await client.generate([Message.user("x")])
        assert await client.health() is False
        await client.aclose()

    asyncio.run(go())


def test_ollama_host_env_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "10.1.2.3:4567")
    assert OllamaEngine().host == "http://10.1.2.3:4567"
    assert OllamaEngine("http://h:1").host == "http://h:1"


def test_official_client_against_standin_error_bodies() -> None:
    with OllamaStandIn(ScriptedEngine()) as standin:
        client = ollama.Client(host=standin.url, timeout=5)
        with pytest.raises(ollama.ResponseError) as info:
            client.chat(model="missing", messages=[{"role": "user", "content": "x"}])
        assert info.value.status_code == 404
        with pytest.raises(ollama.ResponseError) as info:
            client.chat(model="scripted", messages=[{"role": "wizard", "content": "x"}])
        assert info.value.status_code == 400
        # Script exhausted mid-test: a 500 with a body, not a hang or a dropped socket.
        with pytest.raises(ollama.ResponseError) as info:
            client.chat(model="scripted", messages=[{"role": "user", "content": "x"}], stream=False)
        assert info.value.status_code == 500 and "script exhausted" in info.value.error
        client._client.close()
