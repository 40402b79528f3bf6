"""The OpenAI dialects (chat completions, Responses) checked with the official client."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import openai
import pytest

from jarvisd import Role
from jarvisd._runcontext import Budget, RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.gateway import Gateway

from .conftest import CALC, StallingEngine, serve

TOOLS = [{"type": "function", "function": {"name": "calc", "description": "Arithmetic.",
                                           "parameters": CALC}}]  # fmt: skip
RESPONSES_TOOLS = [{"type": "function", "name": "calc", "description": "Arithmetic.",
                    "parameters": CALC, "strict": False}]  # fmt: skip


def client(gw: Gateway, **kw: object) -> openai.AsyncOpenAI:
    assert gw.url is not None
    return openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=gw.token, max_retries=0, **kw)  # type: ignore[arg-type]


def test_chat_tool_call_and_result_round_trip() -> None:
    engine = ScriptedEngine([reply("", ("calc", {"expression": "2+2"})), reply("It is 4.")])

    async def body(gw: Gateway) -> None:
        async with client(gw) as c:
            first = await c.chat.completions.create(
                model="gpt-5", messages=[{"role": "user", "content": "2+2?"}], tools=TOOLS
            )
            choice = first.choices[0]
            assert choice.finish_reason == "tool_calls"
            call = choice.message.tool_calls[0]
            assert call.function.name == "calc"
            assert json.loads(call.function.arguments) == {"expression": "2+2"}
            second = await c.chat.completions.create(
                model="gpt-5",
                messages=[
                    {"role": "user", "content": "2+2?"},
                    choice.message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.id, "content": "4"},
                ],
                tools=TOOLS,
            )
            assert second.choices[0].message.content == "It is 4."
            assert second.usage is not None and second.usage.completion_tokens == 3

    serve(engine, body)
    sent = engine.calls[1].messages
    assert [m.role for m in sent] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert sent[2].tool_call_id == sent[1].tool_calls[0].id and sent[2].name == "calc"
    assert engine.calls[0].tools[0].name == "calc"
    assert engine.calls[0].tools[0].parameters == CALC


def test_chat_streams_text_and_tool_calls() -> None:
    engine = ScriptedEngine(
        [reply("one two three"), reply("let me", ("calc", {"expression": "3*3"}))]
    )

    async def body(gw: Gateway) -> None:
        async with client(gw) as c:
            stream = await c.chat.completions.create(
                model="x", messages=[{"role": "user", "content": "hi"}], stream=True,
                stream_options={"include_usage": True},
            )  # fmt: skip
            chunks = [chunk async for chunk in stream]
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            assert text == "one two three"
            assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
            stream = await c.chat.completions.create(
                model="x", messages=[{"role": "user", "content": "3*3"}], tools=TOOLS, stream=True
            )
            chunks = [chunk async for chunk in stream]
            calls = [tc for ch in chunks for tc in ch.choices[0].delta.tool_calls or ()]
            assert [(tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [
                ("calc", {"expression": "3*3"})
            ]
            assert chunks[-1].choices[0].finish_reason == "tool_calls"

    serve(engine, body)


def test_responses_tool_call_and_result_round_trip() -> None:
    engine = ScriptedEngine([reply("", ("calc", {"expression": "2+2"})), reply("It is 4.")])

    async def body(gw: Gateway) -> None:
        async with client(gw) as c:
            first = await c.responses.create(
                model="gpt-5-codex", instructions="be brief", input="2+2?",
                tools=RESPONSES_TOOLS, store=False,
            )  # fmt: skip
            call = first.output[0]
            assert call.type == "function_call" and call.name == "calc"
            assert json.loads(call.arguments) == {"expression": "2+2"}
            second = await c.responses.create(
                model="gpt-5-codex",
                instructions="be brief",
                input=[
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "2+2?"}],
                    },
                    {"type": "reasoning", "summary": [], "id": "rs_1"},
                    {
                        "type": "function_call",
                        "call_id": call.call_id,
                        "name": "calc",
                        "arguments": call.arguments,
                    },
                    {"type": "function_call_output", "call_id": call.call_id, "output": "4"},
                ],
                tools=RESPONSES_TOOLS,
                store=False,
            )
            assert second.output_text == "It is 4."
            assert second.usage is not None and second.usage.output_tokens == 3

    serve(engine, body)
    sent = engine.calls[1].messages
    assert [m.role for m in sent] == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL]
    assert sent[3].tool_call_id == sent[2].tool_calls[0].id and sent[3].name == "calc"


def test_responses_stream_events_as_codex_reads_them() -> None:
    engine = ScriptedEngine([reply("let me see", ("calc", {"expression": "3*3"}))])

    async def body(gw: Gateway) -> None:
        async with client(gw) as c:
            stream = await c.responses.create(
                model="gpt-5-codex", input="3*3?", tools=RESPONSES_TOOLS, stream=True,
                store=False,
            )  # fmt: skip
            events = [event async for event in stream]
            kinds = [e.type for e in events]
            assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
            text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            assert text == "let me see"
            done = [e.item for e in events if e.type == "response.output_item.done"]
            assert [i.type for i in done] == ["message", "function_call"]
            assert done[1].name == "calc" and json.loads(done[1].arguments) == {"expression": "3*3"}
            assert "response.function_call_arguments.done" in kinds
            final = events[-1].response
            assert [o.type for o in final.output] == ["message", "function_call"]
            assert [e.sequence_number for e in events] == list(range(len(events)))

    serve(engine, body)


def test_the_runs_model_stands_and_max_tokens_is_clamped() -> None:
    engine = ScriptedEngine([reply("a"), reply("b")])

    async def body(gw: Gateway) -> None:
        assert gw.model_name == "served"
        async with client(gw) as c:
            out = await c.chat.completions.create(
                model="gpt-5", messages=[{"role": "user", "content": "hi"}], max_tokens=100_000
            )
            assert out.model == "served"
            await c.responses.create(model="o3", input="hi", max_output_tokens=16)
            models = await c.models.list()
            assert [m.id for m in models.data] == ["served"]

    serve(engine, body, model="served", max_tokens=256)
    assert [call.model for call in engine.calls] == ["served", "served"]
    assert [call.options.max_tokens for call in engine.calls] == [256, 16]


@pytest.mark.parametrize("key", [None, "wrong"])
def test_a_request_without_the_runs_token_is_refused(key: str | None) -> None:
    engine = ScriptedEngine([reply("never")])

    async def body(gw: Gateway) -> None:
        assert gw.url is not None
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=gw.url) as http:
            r = await http.post(
                "/v1/chat/completions", headers=headers,
                json={"model": "x", "messages": [{"role": "user", "content": "hi"}]},
            )  # fmt: skip
            assert r.status_code == 401
            assert r.json()["error"]["type"] == "authentication_error"
            ok = await http.get("/v1/models", params={"key": gw.token})
            assert ok.status_code == 200
        async with openai.AsyncOpenAI(
            base_url=gw.url + "/v1", api_key=key or "x", max_retries=0
        ) as c:
            with pytest.raises(openai.AuthenticationError):
                await c.models.list()

    serve(engine, body)
    assert engine.calls == []


def test_a_spent_budget_is_the_dialects_error_and_no_engine_call() -> None:
    engine = ScriptedEngine([reply("one"), reply("two")])
    run = RunContext(budget=Budget(max_calls=1))

    async def body(gw: Gateway) -> None:
        async with client(gw) as c:
            await c.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
            with pytest.raises(openai.APIStatusError) as info:
                await c.chat.completions.create(
                    model="x", messages=[{"role": "user", "content": "again"}]
                )
            assert info.value.status_code == 402
            assert "budget" in info.value.message

    serve(engine, body, run=run)
    assert len(engine.calls) == 1


def test_cancel_ends_an_inflight_stream_with_an_error_event() -> None:
    engine = StallingEngine()
    run = RunContext()

    async def body(gw: Gateway) -> None:
        async with client(gw) as c:
            stream = await c.chat.completions.create(
                model="x", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            text = []
            with pytest.raises(openai.APIError, match="cancel"):
                async for chunk in stream:
                    text.append(chunk.choices[0].delta.content or "")
                    if engine.started.is_set():
                        run.cancel.cancel("cancelled by the user")
            assert "".join(text) == "hello "

    serve(engine, body, run=run)
    assert engine.closed


def test_responses_stream_cancelled_is_response_failed() -> None:
    engine = StallingEngine()
    run = RunContext()

    async def body(gw: Gateway) -> None:
        async with client(gw) as c:
            stream = await c.responses.create(model="x", input="hi", stream=True)
            kinds = []
            async for event in stream:
                kinds.append(event.type)
                if event.type == "response.output_text.delta":
                    run.cancel.cancel("cancelled by the user")
            assert kinds[-1] == "response.failed"
            assert "cancelled" in event.response.error.message  # type: ignore[union-attr]

    serve(engine, body, run=run)
    assert engine.closed


def test_over_a_private_unix_socket(tmp_path: Path) -> None:
    engine = ScriptedEngine([reply("over the socket")])
    path = tmp_path / "gw.sock"

    async def body(gw: Gateway) -> None:
        assert gw.url is None and gw.socket_path == path
        assert os.stat(path).st_mode & 0o777 == 0o600
        transport = httpx.AsyncHTTPTransport(uds=str(path))
        async with (
            httpx.AsyncClient(transport=transport) as http,
            openai.AsyncOpenAI(
                base_url="http://gateway/v1", api_key=gw.token, http_client=http, max_retries=0
            ) as c,
        ):
            out = await c.chat.completions.create(
                model="x", messages=[{"role": "user", "content": "hi"}]
            )
            assert out.choices[0].message.content == "over the socket"

    serve(engine, body, socket_path=path)
    assert not path.exists()


def test_nothing_is_served_over_a_path_already_taken(tmp_path: Path) -> None:
    from jarvisd import UsageError

    path = tmp_path / "taken.sock"
    path.write_text("not ours")

    async def go() -> None:
        async with Gateway(ScriptedEngine([]), RunContext(), socket_path=path):
            pass

    with pytest.raises(UsageError, match="already there"):
        asyncio.run(go())
    assert path.read_text() == "not ours"


def test_inference_events_are_published_on_the_runs_bus() -> None:
    from jarvisd._events import Event, EventType

    engine = ScriptedEngine([reply("hi there"), reply("streamed")])
    run = RunContext()
    seen: list[Event] = []
    run.bus.subscribe(seen.append)

    async def body(gw: Gateway) -> None:
        async with client(gw) as c:
            await c.chat.completions.create(model="x", messages=[{"role": "user", "content": "a"}])
            stream = await c.responses.create(model="x", input="b", stream=True)
            async for _ in stream:
                pass

    serve(engine, body, run=run)
    kinds = [e.type for e in seen]
    assert kinds == [EventType.INFERENCE_START, EventType.INFERENCE_END] * 2
    assert seen[1].data["completion_tokens"] == 2 and run.budget.used.completion_tokens == 3
    assert run.budget.calls == 2
