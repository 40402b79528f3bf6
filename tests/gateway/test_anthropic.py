"""The Anthropic Messages dialect checked with the official client."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from jarvisd import Role
from jarvisd._runcontext import Budget, RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.gateway import Gateway

from .conftest import CALC, StallingEngine, serve

TOOLS = [{"name": "calc", "description": "Arithmetic.", "input_schema": CALC}]


def client(gw: Gateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.url, api_key=gw.token, max_retries=0)


def test_tool_use_and_tool_result_round_trip() -> None:
    engine = ScriptedEngine([reply("", ("calc", {"expression": "2+2"})), reply("It is 4.")])

    async def body(gw: Gateway) -> None:
        async with client(gw) as c:
            first = await c.messages.create(
                model="any-model", max_tokens=512, tools=TOOLS,  # type: ignore[arg-type]
                system=[{"type": "text", "text": "be brief"}],
                messages=[{"role": "user", "content": "2+2?"}],
            )  # fmt: skip
            assert first.stop_reason == "tool_use"
            use = first.content[0]
            assert use.type == "tool_use" and use.name == "calc"
            assert use.input == {"expression": "2+2"}
            second = await c.beta.messages.create(  # ?beta=true, as Claude Code sends it
                model="any-model", max_tokens=512, tools=TOOLS,  # type: ignore[arg-type]
                system="be brief",
                messages=[
                    {"role": "user", "content": "2+2?"},
                    {"role": "assistant", "content": [use.model_dump()]},  # type: ignore[list-item]
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": use.id,
                         "content": [{"type": "text", "text": "4"}]},
                        {"type": "text", "text": "and so?"},
                    ]},
                ],
            )  # fmt: skip
            assert second.content[0].type == "text" and second.content[0].text == "It is 4."
            assert second.stop_reason == "end_turn" and second.usage.output_tokens == 3

    serve(engine, body)
    sent = engine.calls[1].messages
    assert [m.role for m in sent] == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL, Role.USER]
    assert sent[0].content == "be brief"
    assert sent[3].tool_call_id == sent[2].tool_calls[0].id and sent[3].name == "calc"
    assert engine.calls[0].tools[0].parameters == CALC


def test_stream_text_and_tool_use() -> None:
    engine = ScriptedEngine([reply("let me see", ("calc", {"expression": "3*3"}))])

    async def body(gw: Gateway) -> None:
        async with (
            client(gw) as c,
            c.messages.stream(
                model="any-model",
                max_tokens=64,
                tools=TOOLS,  # type: ignore[arg-type]
                messages=[{"role": "user", "content": "3*3?"}],
            ) as stream,  # fmt: skip
        ):
            text = "".join([t async for t in stream.text_stream])
            final = await stream.get_final_message()
        assert text == "let me see"
        assert [b.type for b in final.content] == ["text", "tool_use"]
        use = final.content[1]
        assert use.type == "tool_use" and use.input == {"expression": "3*3"}
        assert final.stop_reason == "tool_use"

    serve(engine, body)


def test_the_runs_model_stands_and_max_tokens_is_clamped() -> None:
    engine = ScriptedEngine([reply("a")])

    async def body(gw: Gateway) -> None:
        async with client(gw) as c:
            out = await c.messages.create(
                model="some-model", max_tokens=20_000,
                messages=[{"role": "user", "content": "hi"}],
            )  # fmt: skip
            assert out.model == "scripted"
            count = await c.messages.count_tokens(
                model="x", messages=[{"role": "user", "content": "hello there, how are you"}]
            )
            assert count.input_tokens > 0
            models = await c.models.list()
            assert [m.id for m in models.data] == ["scripted"]

    serve(engine, body, max_tokens=300)
    assert engine.calls[0].model == "scripted" and engine.calls[0].options.max_tokens == 300


def test_token_required_in_anthropic_error_shape() -> None:
    async def body(gw: Gateway) -> None:
        async with anthropic.AsyncAnthropic(base_url=gw.url, api_key="nope", max_retries=0) as c:
            with pytest.raises(anthropic.AuthenticationError) as info:
                await c.messages.create(
                    model="x", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
                )
            assert info.value.body == {
                "type": "error",
                "error": {
                    "type": "authentication_error",
                    "message": info.value.body["error"]["message"],
                },  # type: ignore[index]
            }

    serve(ScriptedEngine([]), body)


def test_spent_budget_and_bad_request_in_anthropic_error_shape() -> None:
    engine = ScriptedEngine([reply("one")])

    async def body(gw: Gateway) -> None:
        async with client(gw) as c:
            with pytest.raises(anthropic.BadRequestError, match="messages"):
                await c.messages.create(model="x", max_tokens=5, messages=[])
            await c.messages.create(
                model="x", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
            )
            with pytest.raises(anthropic.APIStatusError) as info:
                await c.messages.create(
                    model="x", max_tokens=5, messages=[{"role": "user", "content": "again"}]
                )
            assert info.value.status_code == 402 and "budget" in info.value.message

    serve(engine, body, run=RunContext(budget=Budget(max_calls=1)))


def test_cancel_ends_an_inflight_stream_with_an_error_event() -> None:
    engine = StallingEngine()
    run = RunContext()

    async def body(gw: Gateway) -> None:
        assert gw.url is not None
        async with client(gw) as c:
            stream = await c.messages.create(
                model="x", max_tokens=50, stream=True,
                messages=[{"role": "user", "content": "hi"}],
            )  # fmt: skip
            kinds = []
            with pytest.raises(anthropic.APIStatusError, match="cancelled"):
                async for event in stream:
                    kinds.append(event.type)
                    if event.type == "content_block_delta":
                        run.cancel.cancel("cancelled by the user")
            assert kinds[:3] == ["message_start", "content_block_start", "content_block_delta"]

    serve(engine, body, run=run)
    assert engine.closed


def test_tool_result_error_flag_reaches_the_model() -> None:
    engine = ScriptedEngine([reply("sorry")])

    async def body(gw: Gateway) -> None:
        assert gw.url is not None
        async with httpx.AsyncClient(base_url=gw.url, headers={"x-api-key": gw.token}) as http:
            r = await http.post("/v1/messages", json={
                "model": "x", "max_tokens": 5,
                "messages": [
                    {"role": "user", "content": "go"},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "hm", "signature": "s"},
                        {"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "boom",
                         "is_error": True}]},
                ],
            })  # fmt: skip
            assert r.status_code == 200, r.text

    serve(engine, body)
    tool = engine.calls[0].messages[-1]
    assert tool.role is Role.TOOL and tool.content == "Error: boom" and tool.name == "calc"
