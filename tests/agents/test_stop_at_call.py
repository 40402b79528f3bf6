"""Stopping at the first complete tool call: once a reply holds its whole calls, the
engine stops generating and the calls run. For every way a model writes a call, the
words after it (the same call again and again, prose, an invented result) are never
produced; calls opened together in one block still all run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jarvisd._messages import ToolCall
from jarvisd._toolcalls import calls_end
from jarvisd.agents import AgentRegistry
from jarvisd.agents._parsing import react_call_end
from jarvisd.engines import Cutoff, ScriptedEngine, reply
from jarvisd.tools import CalculatorTool, ThinkTool

from ._helpers import KINDS, engine_for

CALL = '{"name": "calculator", "arguments": {"expression": "6*7"}}'
OTHER = '{"name": "calculator", "arguments": {"expression": "2+3"}}'
#: What small models write after their call: the call again, and again.
REPEATS = " ".join([CALL] * 12)

FORMATS: dict[str, tuple[str, str]] = {
    "bare": ("orchestrator", f"{CALL}\n{REPEATS}"),
    "fenced": ("orchestrator", f"```json\n{CALL}\n```\nThis will return 42. " + REPEATS),
    "tagged": ("orchestrator", f"<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{REPEATS}"),
    "prose then call": ("orchestrator", f"I will compute it. {CALL} The result is 41. {REPEATS}"),
    "react": (
        "native_react",
        f'Thought: compute\nAction: calculator\nAction Input: {{"expression": "6*7"}}\n'
        f"Observation: 41\nThought: done\nFinal Answer: 41 {REPEATS}",
    ),
}
FINAL = {"orchestrator": "The answer is 42.", "native_react": "Thought: done\nFinal Answer: 42"}


def run_agent(key: str, replies: list[Any], kind: str = "direct") -> tuple[Any, ScriptedEngine]:
    scripted = ScriptedEngine(replies)

    async def go() -> Any:
        with engine_for(kind, scripted) as engine:
            agent = AgentRegistry.create(
                key, engine, "scripted", temperature=0, tools=[CalculatorTool(), ThinkTool()]
            )
            try:
                return await agent.arun("What are 6*7 and 2+3?")
            finally:
                if engine is not scripted:
                    await engine.aclose()

    return asyncio.run(go()), scripted


def words(text: str) -> int:
    return len([w for w in text.split(" ") if w])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("form", list(FORMATS))
def test_generation_stops_at_the_first_complete_call(form: str, kind: str) -> None:
    key, text = FORMATS[form]
    result, engine = run_agent(key, [reply(text), reply(FINAL[key])], kind)
    assert result.content.endswith("42") or "42" in result.content
    assert [r.content for r in result.tool_results] == ["42"]
    # The call turn produced its call and at most one copy of it (a repeat is known
    # once it is complete) or one word after it; never the dozen repeats.
    bound = 2 * words(text[: text.index("6*7") + 10]) + 1 + words(FINAL[key])
    assert result.usage.completion_tokens <= bound  # what the run was charged
    if kind == "direct" or key == "orchestrator":
        # Where the model runs: the engine itself, or the server a client offered
        # tools (it stops there). A client of a ReAct reply stops reading instead:
        # the scripted server has written its whole reply by then.
        assert engine.produced <= bound
        assert engine.produced < words(text) // 4


@pytest.mark.parametrize("kind", KINDS)
def test_calls_opened_together_all_run(kind: str) -> None:
    parallel = f"[{CALL}, {OTHER}]\n{REPEATS}"
    result, engine = run_agent("orchestrator", [reply(parallel), reply("42 and 5")], kind)
    assert sorted(r.content for r in result.tool_results) == ["42", "5"]
    # The array, then at most one repeat of a call in it.
    assert engine.produced <= words(f"[{CALL}, {OTHER}]") + words(CALL) + 2
    tagged = (
        f"<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{OTHER}\n</tool_call>\nDone. {REPEATS}"
    )
    result, engine = run_agent("orchestrator", [reply(tagged), reply("42 and 5")], kind)
    assert sorted(r.content for r in result.tool_results) == ["42", "5"]
    assert engine.produced < words(tagged) // 4


def test_native_calls_stop_at_a_repeat() -> None:
    call = ("calculator", {"expression": "6*7"})
    result, engine = run_agent("orchestrator", [reply("", call, call, call), reply("42")])
    assert [r.content for r in result.tool_results] == ["42"]
    # The engine's generation kept one call: the repeats were never taken.
    assert engine.calls and len(engine.calls) == 2


def test_an_answer_is_never_cut() -> None:
    answer = 'The JSON is {"name": "Alice"} and the sum is 42, as computed.'
    result, engine = run_agent("orchestrator", [reply(answer)])
    assert result.content == answer and engine.produced == words(answer)


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        (CALL, None),  # more calls may follow
        (f"{CALL}\n", None),
        (f"{CALL}\nThe", len(CALL) + 1),  # prose follows: cut before it
        (f"{CALL}\n{CALL}", len(CALL) + 1),  # a repeat
        (f"{CALL}\n{OTHER}", None),  # a second call of the block
        (f"{CALL}\n{OTHER}\nok", 2 * len(CALL) + 2),
        (f"[{CALL}, {OTHER[:30]}", None),  # an array still open
        (f"<tool_call>\n{CALL}\n</tool_call>\n<tool_", None),  # may open another tag
        (f"```json\n{CALL}\n```\nDone", len(CALL) + 13),  # the fence stays
        (f'{CALL}\n{{"name": "calculator", "arguments": {{"expression": "3"}}', None),
        (f'{CALL}\n{{"result": 42}}', len(CALL) + 1),  # JSON that is not a call
        ('{"name": "Alice"} said hi', None),  # no call at all
        # Calls in doubled braces (Qwen2.5 writes them so at times): the wrapping brace
        # is not prose, so the calls after the first still come.
        (f"{{{CALL}}}\n", None),
        (f"{{{CALL}}}\n{{{OTHER}}}\nok", 2 * len(CALL) + 6),
        (f"{{{CALL}}}\n{{{CALL}}}", len(CALL) + 3),  # a repeat
    ],
)
def test_calls_end(text: str, cut: int | None) -> None:
    assert calls_end(text, ["calculator"]) == cut


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        ('Action: calculator\nAction Input: {"expression": "6*7"', None),
        ('Action: calculator\nAction Input: {"expression": "6*7"}', 54),
        ("Action: calculator\nAction Input: 6*7", None),  # the line may go on
        ("Action: calculator\nAction Input: 6*7\nObs", 36),
        ("Final Answer: 4\nAction: calculator\nAction Input: 6*7\n", None),
    ],
)
def test_react_call_end(text: str, cut: int | None) -> None:
    assert react_call_end(text) == cut


def test_cutoff_keeps_what_came_before_the_cut() -> None:
    cutoff = Cutoff(lambda text: calls_end(text, ["calculator"]))
    call = ToolCall.from_arguments("calculator", {"expression": "6*7"})
    assert not cutoff.text("Sure. ")
    assert not cutoff.call(call)
    assert cutoff.text(" Then")  # text after a native call ends the reply
    text, calls = cutoff.kept()
    assert text.strip() == "Sure." and calls == (call,)
    assert cutoff.tokens == 2


@pytest.mark.parametrize("client", ["openai", "ollama"])
def test_http_engines_stop_reading_at_the_cut(client: str) -> None:
    """A client engine given ``stop_when`` stops reading the server's stream at the
    cut (closing it), and reports the reply up to there."""
    from jarvisd._messages import Message, SamplingOptions
    from jarvisd.engines import OllamaEngine, OpenAIEngine
    from jarvisd.testing import OllamaStandIn

    text = f"{CALL}\nThe result is 41. {REPEATS}"
    scripted = ScriptedEngine([reply(text)])
    options = SamplingOptions(stop_when=lambda t: calls_end(t, ["calculator"]))

    async def go(url: str) -> Any:
        engine: Any = (
            OpenAIEngine(url + "/v1", model="scripted", api_key="")
            if client == "openai"
            else OllamaEngine(url, model="scripted", timeout=30)
        )
        try:
            return await engine.generate([Message.user("6*7?")], options=options)
        finally:
            await engine.aclose()

    with OllamaStandIn(scripted) as standin:
        generation = asyncio.run(go(standin.url))
    assert generation.content.strip() == CALL
    assert generation.usage.completion_tokens == words(CALL)  # its last piece holds "The"
