"""The OpenAI-compatible engine against jarvis's own /v1 endpoints (real HTTP)."""

from __future__ import annotations

import asyncio
import json

import pytest

from jarvisd import EngineResponseError, EngineUnavailable, Message, ToolSpec
from jarvisd.engines import OpenAIEngine, ScriptedEngine, reply
from jarvisd.testing import OllamaStandIn

CALC = ToolSpec(
    "calculator",
    "Evaluate arithmetic.",
    {"type": "object", "properties": {"expression": {"type": "string"}}},
)


def test_generate_stream_and_tool_calls() -> None:
    engine = ScriptedEngine(
        [
            reply("hello world"),
            reply("", ("calculator", {"expression": "2**10"})),
            reply("one two"),
            reply("", ("calculator", {"expression": "3*3"})),
        ]
    )

    async def go(url: str) -> None:
        client = OpenAIEngine(url + "/v1", model="scripted", api_key="")
        g = await client.generate([Message.system("be brief"), Message.user("hi")])
        assert g.content == "hello world" and g.usage.completion_tokens == 2
        g = await client.generate([Message.user("2^10?")], tools=[CALC])
        assert g.tool_calls[0].name == "calculator" and g.tool_calls[0].arguments_dict() == {
            "expression": "2**10"
        }
        # The tool result travels back with its call id.
        history = [
            Message.user("2^10?"),
            g.to_message(),
            Message.tool("1024", tool_call_id=g.tool_calls[0].id, name="calculator"),
        ]
        chunks = [c async for c in client.stream(history)]
        assert "".join(c.delta for c in chunks) == "one two"
        assert chunks[-1].done and chunks[-1].generation is not None
        assert chunks[-1].generation.usage.completion_tokens == 2
        chunks = [c async for c in client.stream([Message.user("3*3")], tools=[CALC])]
        final = chunks[-1].generation
        assert final is not None and final.tool_calls[0].arguments_dict() == {"expression": "3*3"}
        assert [m.name for m in await client.list_models()] == ["scripted"]
        await client.aclose()

    with OllamaStandIn(engine) as standin:
        asyncio.run(go(standin.url))
    sent = engine.calls[2].messages
    assert sent[2].tool_call_id == sent[1].tool_calls[0].id


def test_errors_are_translated() -> None:
    async def go(url: str) -> None:
        client = OpenAIEngine(url + "/v1", model="scripted")
        with pytest.raises(EngineResponseError, match="HTTP 503"):
            await client.generate([Message.user("x")])
        await client.aclose()
        down = OpenAIEngine("http://127.0.0.1:9/v1")
        with pytest.raises(EngineUnavailable, match="cannot reach"):
            await down.generate([Message.user("x")])
        await down.aclose()

    with OllamaStandIn(ScriptedEngine([EngineUnavailable("backend warming up")])) as standin:
        asyncio.run(go(standin.url))


def test_without_a_model_it_asks_for_the_servers_first() -> None:
    engine = ScriptedEngine([reply("hi"), reply("there")])

    async def go(url: str) -> None:
        client = OpenAIEngine(url + "/v1", api_key="")  # no model configured
        assert (await client.generate([Message.user("x")])).model == "scripted"
        chunks = [c async for c in client.stream([Message.user("y")])]
        assert chunks[-1].generation is not None and chunks[-1].generation.content == "there"
        await client.aclose()

    with OllamaStandIn(engine) as standin:
        asyncio.run(go(standin.url))
        asked = [b["model"] for _, p, b in standin.requests if p == "/v1/chat/completions"]
    assert asked == ["scripted", "scripted"]


def test_without_a_model_the_default_is_the_one_the_server_used() -> None:
    # What a run reports as its model (`jarvis ask --json`) when none was configured.
    engine = ScriptedEngine([reply("hi"), reply("there")])

    async def go(url: str) -> None:
        client = OpenAIEngine(url + "/v1", api_key="")
        assert client.default_model() == ""  # nothing asked yet
        await client.generate([Message.user("x")])
        assert client.default_model() == "scripted"
        await client.aclose()
        client = OpenAIEngine(url + "/v1", api_key="")
        [c async for c in client.stream([Message.user("y")])]
        assert client.default_model() == "scripted"
        await client.aclose()

    with OllamaStandIn(engine) as standin:
        asyncio.run(go(standin.url))


def test_the_default_follows_what_the_server_reports_not_other_callers_models() -> None:
    import httpx

    asked: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "alias"}]})
        model = json.loads(request.content)["model"]
        asked.append(model)
        served = "model-2024" if model in ("alias", "model-2024") else model
        message = {"role": "assistant", "content": "ok"}
        return httpx.Response(
            200, json={"model": served, "choices": [{"message": message, "finish_reason": "stop"}]}
        )

    async def go() -> None:
        client = OpenAIEngine("http://server.invalid/v1", api_key="")
        client._client = httpx.AsyncClient(
            transport=httpx.MockTransport(server), base_url=client.base_url
        )
        await client.generate([Message.user("x")])
        assert client.default_model() == "model-2024"  # the reply's, not the listed alias
        await client.generate([Message.user("x")], model="other")  # e.g. the llm tool's own
        assert client.default_model() == "model-2024"
        await client.generate([Message.user("x")])
        await client.aclose()

    asyncio.run(go())
    assert asked == ["alias", "other", "model-2024"]
