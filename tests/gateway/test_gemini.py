"""The Gemini dialect checked with the official google-genai client."""

from __future__ import annotations

import pytest
from google import genai
from google.genai import errors, types

from jarvisd import Role
from jarvisd._runcontext import Budget, RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.gateway import Gateway

from .conftest import StallingEngine, serve

CALC = types.FunctionDeclaration(
    name="calc",
    description="Arithmetic.",
    parameters=types.Schema(
        type=types.Type.OBJECT,
        properties={"expression": types.Schema(type=types.Type.STRING)},
        required=["expression"],
    ),
)


def client(gw: Gateway, key: str | None = None) -> genai.Client:
    return genai.Client(
        api_key=key or gw.token,
        http_options=types.HttpOptions(
            base_url=gw.url, retry_options=types.HttpRetryOptions(attempts=1)
        ),
    )


def config(**kw: object) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[CALC])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        **kw,  # type: ignore[arg-type]
    )


def test_function_call_and_response_round_trip() -> None:
    engine = ScriptedEngine([reply("", ("calc", {"expression": "2+2"})), reply("It is 4.")])

    async def body(gw: Gateway) -> None:
        async with client(gw).aio as c:
            await first_and_second(c)

    async def first_and_second(c: genai.client.AsyncClient) -> None:
        question = types.Content(role="user", parts=[types.Part(text="2+2?")])
        first = await c.models.generate_content(
            model="gemini-2.5-pro", contents=[question],
            config=config(system_instruction="be brief"),
        )  # fmt: skip
        assert first.function_calls is not None
        call = first.function_calls[0]
        assert call.name == "calc" and call.args == {"expression": "2+2"}
        second = await c.models.generate_content(
            model="gemini-2.5-pro",
            contents=[
                question,
                first.candidates[0].content,  # type: ignore[index,list-item]
                types.Content(
                    role="user",
                    parts=[
                        types.Part.from_function_response(name="calc", response={"output": "4"})
                    ],
                ),
            ],
            config=config(system_instruction="be brief"),
        )
        assert second.text == "It is 4."
        assert second.usage_metadata is not None
        assert second.usage_metadata.candidates_token_count == 3

    serve(engine, body)
    sent = engine.calls[1].messages
    assert [m.role for m in sent] == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL]
    assert sent[3].tool_call_id == sent[2].tool_calls[0].id and sent[3].content == "4"
    # Gemini's schema (types in capitals) reaches the model as JSON schema.
    assert engine.calls[0].tools[0].parameters["properties"] == {"expression": {"type": "string"}}


def test_stream_text_and_function_call() -> None:
    engine = ScriptedEngine([reply("let me see", ("calc", {"expression": "3*3"}))])

    async def body(gw: Gateway) -> None:
        async with client(gw).aio as c:
            await streamed(c)

    async def streamed(c: genai.client.AsyncClient) -> None:
        chunks = [
            chunk
            async for chunk in await c.models.generate_content_stream(
                model="gemini-2.5-flash", contents="3*3?", config=config(max_output_tokens=99_999)
            )
        ]
        assert "".join(ch.text or "" for ch in chunks[:-1]) == "let me see"
        last = chunks[-1]
        assert last.function_calls is not None and last.function_calls[0].args == {
            "expression": "3*3"
        }
        assert last.candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]

    serve(engine, body, max_tokens=200)
    assert engine.calls[0].options.max_tokens == 200 and engine.calls[0].model == "scripted"


def test_token_required_and_errors_in_gemini_shape() -> None:
    engine = ScriptedEngine([reply("one")])

    async def body(gw: Gateway) -> None:
        async with client(gw, key="wrong").aio as wrong:
            with pytest.raises(errors.ClientError) as info:
                await wrong.models.generate_content(model="m", contents="hi")
        assert info.value.code == 401 and info.value.status == "UNAUTHENTICATED"
        async with client(gw).aio as c:
            await spend(c)

    async def spend(c: genai.client.AsyncClient) -> None:
        await c.models.generate_content(model="m", contents="hi")
        with pytest.raises(errors.ClientError) as info:
            await c.models.generate_content(model="m", contents="again")
        assert info.value.code == 402 and "budget" in (info.value.message or "")
        counted = await c.models.count_tokens(model="m", contents="hello there, how are you")
        assert counted.total_tokens and counted.total_tokens > 0

    serve(engine, body, run=RunContext(budget=Budget(max_calls=1)))


def test_cancel_ends_an_inflight_stream_with_an_error() -> None:
    engine = StallingEngine()
    run = RunContext()

    async def body(gw: Gateway) -> None:
        texts = []
        async with client(gw).aio as c:
            with pytest.raises(errors.APIError, match="cancelled"):
                async for chunk in await c.models.generate_content_stream(model="m", contents="hi"):
                    texts.append(chunk.text)
                    run.cancel.cancel("cancelled by the user")
        assert texts == ["hello "]

    serve(engine, body, run=run)
    assert engine.closed
