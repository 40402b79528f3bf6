"""serve-model's replies in each client's own shape, over a scripted engine (tier 1):
OpenAI's error object under /v1, ``"format": "json"`` reaching the engine, no stray
text beside a tool call; and the gateway's status lines carry their reason phrase."""

from __future__ import annotations

import json

import httpx
import ollama
import openai
import pytest

from jarvisd.engines import ScriptedEngine, reply
from jarvisd.gateway import Gateway
from jarvisd.testing import OllamaStandIn
from tests.gateway.conftest import serve
from tests.gateway.test_http import exchange, head

CALL = ("calculator", {"expression": "1234 * 5678"})


def test_errors_under_v1_have_openais_shape_and_the_client_reads_them() -> None:
    with OllamaStandIn(ScriptedEngine([])) as standin:
        raw = httpx.post(f"{standin.url}/v1/chat/completions", json={
            "model": "llama9", "messages": [{"role": "user", "content": "x"}]})  # fmt: skip
        assert raw.status_code == 404
        error = raw.json()["error"]
        assert set(error) >= {"message", "type", "code"}
        assert "llama9" in error["message"] and error["type"] == "not_found_error"
        bad = httpx.post(f"{standin.url}/v1/chat/completions", content=b"{not json")
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
        client = openai.OpenAI(base_url=f"{standin.url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.NotFoundError) as info:
            client.chat.completions.create(
                model="llama9", messages=[{"role": "user", "content": "x"}]
            )
        assert "llama9" in info.value.message
        client.close()
        # Ollama's own endpoints keep Ollama's shape.
        native = httpx.post(f"{standin.url}/api/chat", json={
            "model": "llama9", "messages": [{"role": "user", "content": "x"}]})  # fmt: skip
        assert native.status_code == 404 and isinstance(native.json()["error"], str)


def test_format_json_reaches_the_engine_on_every_endpoint() -> None:
    engine = ScriptedEngine(fallback=reply('{"color": "blue"}'))
    with OllamaStandIn(engine) as standin:
        client = ollama.Client(host=standin.url, timeout=10)
        messages = [{"role": "user", "content": "A color, as JSON."}]
        client.chat(model="scripted", messages=messages, format="json")
        client.generate(model="scripted", prompt="A color, as JSON.", format="json")
        client.chat(model="scripted", messages=messages)
        client._client.close()
        httpx.post(f"{standin.url}/v1/chat/completions", json={
            "model": "scripted", "messages": messages,
            "response_format": {"type": "json_object"}})  # fmt: skip
        refused = httpx.post(f"{standin.url}/api/chat", json={
            "model": "scripted", "messages": messages, "format": "yaml"})  # fmt: skip
        assert refused.status_code == 400 and "format" in refused.json()["error"]
    assert [call.options.json_format for call in engine.calls] == [True, True, False, True]
    # What llama.cpp is given for it: its JSON mode.
    assert engine.calls[0].options.to_openai()["response_format"] == {"type": "json_object"}


def test_no_stray_text_is_returned_beside_a_tool_call() -> None:
    # 1.5B's second turn of a round trip: content "{" beside the call.
    engine = ScriptedEngine(fallback=reply("{", CALL))
    with OllamaStandIn(engine) as standin:
        client = ollama.Client(host=standin.url, timeout=10)
        answer = client.chat(model="scripted", messages=[{"role": "user", "content": "x"}],
                             tools=[], stream=False)  # fmt: skip
        client._client.close()
        assert answer.message.tool_calls and answer.message.content == ""
        raw = httpx.post(f"{standin.url}/v1/chat/completions", json={
            "model": "scripted", "messages": [{"role": "user", "content": "x"}]}).json()  # fmt: skip
        message = raw["choices"][0]["message"]
        assert message["tool_calls"] and not message["content"]


def test_the_gateways_refusals_carry_a_reason_phrase() -> None:
    async def body(gw: Gateway) -> None:
        out = await exchange(gw, head(gw, "Content-Length: 5\r\n") + b"{nope", eof=True)
        assert out.startswith(b"HTTP/1.1 400 Bad Request\r\n"), out[:80]
        assert json.loads(out.split(b"\r\n\r\n", 1)[1])["error"]["type"] == "invalid_request_error"

    serve(ScriptedEngine([]), body)
