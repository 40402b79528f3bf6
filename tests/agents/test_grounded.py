"""Grounded answers: an answer that drops the values the tools returned is asked for
once more, in one turn without tools, and the model's next answer is returned as it is.
Correct answers are never asked again, and what was streamed is the run's answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jarvisd._messages import ToolResult
from jarvisd._runcontext import RunContext
from jarvisd.agents import AgentRegistry
from jarvisd.agents._toolloop import drops_results
from jarvisd.engines import Engine, ScriptedEngine, reply
from jarvisd.executors import SubprocessExecutor
from jarvisd.tools import CalculatorTool, ThinkTool

from ._helpers import KINDS, engine_for

CALL = {
    "orchestrator": lambda expr: reply("", ("calculator", {"expression": expr})),
    "native_react": lambda expr: reply(
        f'Thought: compute it\nAction: calculator\nAction Input: {{"expression": "{expr}"}}'
    ),
    "native_openhands": lambda expr: reply(
        f'{{"name": "calculator", "arguments": {{"expression": "{expr}"}}}}'
    ),
}
FINAL = {
    "orchestrator": lambda text: reply(text),
    "native_react": lambda text: reply(f"Thought: done\nFinal Answer: {text}"),
    "native_openhands": lambda text: reply(f"Final Answer: {text}"),
}
AGENTS = list(CALL)
TASK = "What is 17.5% of 86420?"
DROPPED = "This will return the result of the expression."


def make(key: str, engine: Engine) -> Any:
    kw: dict[str, Any] = {"tools": [CalculatorTool(), ThinkTool()]}
    if key == "native_openhands":
        kw.update(executor=SubprocessExecutor(), allow_network=False)
    return AgentRegistry.create(key, engine, "scripted", temperature=0, **kw)


def arun(agent: Any, text: str, run: RunContext | None = None) -> Any:
    async def go() -> Any:
        try:
            return await agent.arun(text, run=run)
        finally:
            if not isinstance(agent.engine, ScriptedEngine):
                await agent.engine.aclose()

    return asyncio.run(go())


def results(*contents: str, success: bool = True) -> list[ToolResult]:
    return [ToolResult("calculator", text, success=success) for text in contents]


# -- what drops the results ------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "contents"),
    [
        ("It is 15123.5.", ["15123.5"]),
        ("About 15,123.50 euros.", ["15123.5"]),
        ("Roughly 15124.", ["15123.5"]),  # rounded to the precision shown
        ("Roughly 15,123.", ["15123.5"]),
        ("pi is 3.14", ["3.14159265359"]),
        ("The answer is 42.0", ["42"]),
        ("1,234 apples", ["1234"]),
        ("The total is 1234", ["1,234"]),
        ("It dropped by 5 degrees.", ["-5"]),
        ("That is 12%.", ["0.12"]),
        ("About 1.5 x 10^20.", ["1.5e+20"]),
        ("First 5, then 20.", ["5", "20"]),
        ("The result is 20.", ["5", "20"]),  # any one result stated is enough
        ("Paris.", ["the capital is Paris"]),  # not a number: never checked
        ("No idea.", []),  # no tool ran
        ("No idea.", ["0" * 2000]),  # printed digits, not a number to state
    ],
)
def test_an_answer_that_states_a_result_or_has_none_to_state_is_kept(
    answer: str, contents: list[str]
) -> None:
    assert not drops_results(answer, results(*contents))


@pytest.mark.parametrize(
    ("answer", "contents"),
    [
        (DROPPED, ["15123.5"]),
        ("The result of 17.5% of 86420 is .", ["15123.5"]),  # a blank, the inputs kept
        ("This will return the result of 6*7.", ["42"]),
        ("It is 43.", ["42"]),
        ("It is 15120.", ["15123.5"]),
    ],
)
def test_an_answer_without_any_result_drops_them(answer: str, contents: list[str]) -> None:
    assert drops_results(answer, results(*contents))


def test_failed_results_are_not_values_to_state() -> None:
    assert not drops_results("It failed.", results("42", success=False))


# -- the loop ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", AGENTS)
def test_an_answer_that_drops_the_result_is_asked_once_more(key: str, kind: str) -> None:
    scripted = ScriptedEngine(
        [CALL[key]("17.5% of 86420"), FINAL[key](DROPPED), reply("It is 15,123.5.")]
    )
    with engine_for(kind, scripted) as engine:
        result = arun(make(key, engine), TASK)
    assert result.content == "It is 15,123.5."
    assert result.metadata["reasked"] is True and "error" not in result.metadata
    assert result.turns == 3 and len(scripted.calls) == 3
    reask = scripted.calls[2]
    assert reask.tools == ()  # a turn without tools
    assert "did not state the values" in reask.messages[-1].content
    assert "returned: 15123.5" in reask.messages[-1].content


@pytest.mark.parametrize("key", AGENTS)
def test_the_second_answer_is_returned_as_it_is_and_never_asked_again(key: str) -> None:
    scripted = ScriptedEngine(
        [CALL[key]("6*7"), FINAL[key](DROPPED), reply("I would rather not say."), reply("42")]
    )
    result = arun(make(key, scripted), "6*7?")
    assert result.content == "I would rather not say."
    assert result.metadata["reasked"] is True and len(scripted.calls) == 3


@pytest.mark.parametrize("key", AGENTS)
def test_a_correct_answer_is_not_asked_again(key: str) -> None:
    scripted = ScriptedEngine([CALL[key]("17.5% of 86420"), FINAL[key]("About 15,124.")])
    result = arun(make(key, scripted), TASK)
    assert result.content == "About 15,124." and "reasked" not in result.metadata
    assert len(scripted.calls) == 2


def test_the_question_again_stays_within_max_turns() -> None:
    scripted = ScriptedEngine([CALL["orchestrator"]("6*7"), reply(DROPPED), reply("42")])
    agent = AgentRegistry.create(
        "orchestrator", scripted, "scripted", tools=[CalculatorTool()], max_turns=2
    )
    result = arun(agent, "6*7?")
    assert result.content == DROPPED and result.turns == 2 and len(scripted.calls) == 2


def test_a_run_without_tools_is_never_asked_again() -> None:
    scripted = ScriptedEngine([reply("I cannot compute that.")])
    result = arun(make("orchestrator", scripted), TASK)
    assert result.content == "I cannot compute that." and len(scripted.calls) == 1


@pytest.mark.parametrize("key", AGENTS)
def test_the_answer_turn_is_asked_once_more_too(key: str) -> None:
    # The same call twice: the second is blocked, and the answer turn drops the value.
    scripted = ScriptedEngine(
        [CALL[key]("6*7"), CALL[key]("6*7"), reply(DROPPED), reply("42"), reply("42")]
    )
    result = arun(make(key, scripted), "6*7?")
    assert result.content == "42" and len(scripted.calls) == 4
    assert result.metadata["answer_turn"] is True and result.metadata["reasked"] is True


@pytest.mark.parametrize("key", AGENTS)
def test_a_reply_that_calls_again_keeps_the_first_answer(key: str) -> None:
    scripted = ScriptedEngine([CALL[key]("6*7"), FINAL[key](DROPPED), CALL[key]("6*7")])
    result = arun(make(key, scripted), "6*7?")
    assert result.content == DROPPED and "error" not in result.metadata
    assert result.metadata["reasked"] is True and len(scripted.calls) == 3


# -- streaming -----------------------------------------------------------------------


def streamed(key: str, script: list[Any]) -> tuple[Any, list[str], ScriptedEngine]:
    deltas: list[str] = []
    scripted = ScriptedEngine(script)
    result = arun(make(key, scripted), "6*7?", RunContext(on_delta=deltas.append))
    return result, deltas, scripted


def test_an_answer_read_whole_is_asked_again_before_anything_goes_out() -> None:
    # The orchestrator's answer goes out once the reply is read: the check comes first.
    result, deltas, scripted = streamed(
        "orchestrator", [CALL["orchestrator"]("6*7"), reply(DROPPED), reply("It is 42.")]
    )
    assert result.content == "It is 42." and result.metadata["reasked"] is True
    assert "".join(deltas) == "It is 42." and len(scripted.calls) == 3


@pytest.mark.parametrize("key", ["native_react", "native_openhands"])
def test_an_answer_that_already_streamed_is_kept(key: str) -> None:
    # ReAct and CodeAct stream from Final Answer: on; once it went out it stays the
    # answer (asking again would make the streamed text differ from the answer).
    result, deltas, scripted = streamed(key, [CALL[key]("6*7"), FINAL[key](DROPPED)])
    assert result.content == DROPPED and "reasked" not in result.metadata
    assert "".join(deltas) == DROPPED and len(scripted.calls) == 2


@pytest.mark.parametrize("key", AGENTS)
def test_a_streamed_answer_turn_asked_again_streams_only_the_final_answer(key: str) -> None:
    # The answer turn's plain reply is not committed while it streams, so it may still
    # be asked again; only the second answer goes out.
    result, deltas, scripted = streamed(
        key, [CALL[key]("6*7"), CALL[key]("6*7"), reply(DROPPED), reply("It is 42.")]
    )
    assert result.content == "It is 42." and result.metadata["reasked"] is True
    assert "".join(deltas) == "It is 42." and len(scripted.calls) == 4
