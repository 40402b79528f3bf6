"""InstrumentedEngine: every inference start gets an end with tokens and latency, or the
error, whether the caller generates or streams."""

from __future__ import annotations

import asyncio

import pytest

from jarvisd import EngineResponseError, Message, Usage
from jarvisd._events import Event, EventBus, EventType
from jarvisd.engines import InstrumentedEngine, ScriptedEngine, reply

HELLO = [Message.system("be brief"), Message.user("hi")]


def instrumented(*script: object, latency_s: float = 0.0) -> tuple[InstrumentedEngine, list[Event]]:
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(events.append)
    engine = ScriptedEngine(list(script), latency_s=latency_s)  # type: ignore[arg-type]
    return InstrumentedEngine(engine, bus), events


def test_generate_publishes_start_and_end_with_tokens_and_latency() -> None:
    engine, events = instrumented(reply("two words", usage=Usage(7, 2)), latency_s=0.05)
    generation = asyncio.run(engine.generate(HELLO))
    assert [e.type for e in events] == [EventType.INFERENCE_START, EventType.INFERENCE_END]
    start, end = (e.data for e in events)
    assert start == {"engine": "scripted", "model": "scripted", "messages": 2}
    assert end["prompt_tokens"] == 7 and end["completion_tokens"] == 2
    assert end["tool_calls"] == 0 and "error" not in end
    assert end["latency_s"] >= 0.05 and generation.latency_s == end["latency_s"]


def test_stream_publishes_end_once_with_the_final_counts() -> None:
    engine, events = instrumented(reply("", ("calculator", {"expression": "1+1"})))

    async def go() -> list[object]:
        return [c async for c in engine.stream(HELLO)]

    chunks = asyncio.run(go())
    assert [e.type for e in events] == [EventType.INFERENCE_START, EventType.INFERENCE_END]
    assert events[1].data["tool_calls"] == 1 and events[1].data["latency_s"] > 0
    final = chunks[-1]
    assert final.generation is not None and final.generation.latency_s > 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("streaming", [False, True])
def test_a_failed_call_still_ends_with_the_error(streaming: bool) -> None:
    engine, events = instrumented(EngineResponseError("model exploded", 500))

    async def go() -> None:
        if streaming:
            async for _ in engine.stream(HELLO):
                pass
        else:
            await engine.generate(HELLO)

    with pytest.raises(EngineResponseError):
        asyncio.run(go())
    assert [e.type for e in events] == [EventType.INFERENCE_START, EventType.INFERENCE_END]
    assert events[1].data["error"] == "EngineResponseError: model exploded"
