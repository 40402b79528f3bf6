"""Held calls: the orchestrator does not run a call whose values the conversation never
gave (what small models write when no tool fits: a team, a date, a number made up); it
asks once, without tools, for the answer instead. Scripted engines, directly and
through the Ollama protocol."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jarvisd._messages import ToolSpec
from jarvisd.agents import AgentRegistry
from jarvisd.engines import Engine, ScriptedEngine, reply
from jarvisd.tools import BaseTool, CalculatorTool

from ._helpers import KINDS, engine_for


class MatchStats(BaseTool):
    """A BFCL-like lookup that needs values a user gives."""

    spec = ToolSpec(  # type: ignore[assignment]
        "get_match_stats",
        "Statistics of a team's matches in a football tournament such as the World Cup.",
        {
            "type": "object",
            "properties": {
                "team_name": {"type": "string"},
                "tournament": {"type": "string"},
                "year": {"type": "integer"},
            },
            "required": ["team_name", "tournament"],
        },
    )

    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []

    def execute(self, **params: Any) -> str:
        self.ran.append(params)
        return "Germany: 7 matches, 7 wins"


def run(engine: Engine, question: str, **options: Any) -> tuple[Any, MatchStats]:
    stats = MatchStats()
    agent = AgentRegistry.create(
        "orchestrator", engine, "scripted", temperature=0,
        tools=[stats, CalculatorTool()], **options,
    )  # fmt: skip

    async def go() -> Any:
        try:
            return await agent.arun(question)
        finally:
            if not isinstance(engine, ScriptedEngine):
                await engine.aclose()

    return asyncio.run(go()), stats


MADE_UP = ("get_match_stats", {"team_name": "Germany", "tournament": "World Cup"})
QUESTION = "Who won the last world cup in football?"


@pytest.mark.parametrize("kind", KINDS)
def test_a_call_on_made_up_values_is_not_run_and_the_model_answers_instead(kind: str) -> None:
    scripted = ScriptedEngine([reply("", MADE_UP), reply("Argentina won the 2022 World Cup.")])
    with engine_for(kind, scripted) as engine:
        result, stats = run(engine, QUESTION)
    assert stats.ran == [] and result.tool_results == []
    assert result.content == "Argentina won the 2022 World Cup."
    assert result.metadata["held_calls"] == [
        {"tool": "get_match_stats", "invented": {"team_name": "Germany"}}
    ]
    # The second turn was asked again with the tools not held, saying which argument
    # the request left out but not the value made up (read back, it becomes the answer).
    second = scripted.calls[1]
    assert [t.name for t in second.tools] == ["calculator"]
    assert QUESTION in [m.content for m in second.messages]
    note = second.messages[-1].content
    assert "the request does not give the team_name that get_match_stats needs" in note
    assert "Germany" not in "".join(m.content for m in second.messages)


def test_a_model_that_calls_the_held_tool_again_gets_no_call_run_and_the_user_is_told_what_is_missing() -> (
    None
):
    scripted = ScriptedEngine([reply("", MADE_UP), reply('{"name": "get_match_stats", '
                               '"arguments": {"team_name": "Germany", "tournament": "x"}}')])  # fmt: skip
    result, stats = run(scripted, QUESTION)
    assert stats.ran == []
    assert "team_name='Germany'" in result.content and "Say what is needed" in result.content
    assert "error" not in result.metadata
    assert len(scripted.calls) == 2


def test_with_one_turn_left_a_held_call_ends_the_run_without_another_generation() -> None:
    # jarvis eval bfcl reads the first turn only (max_turns=1).
    scripted = ScriptedEngine([reply("", MADE_UP)])
    result, stats = run(scripted, QUESTION, max_turns=1)
    assert stats.ran == [] and len(scripted.calls) == 1
    assert result.metadata["held_calls"][0]["tool"] == "get_match_stats"


@pytest.mark.parametrize(
    "question",
    [
        "How did Germany do in the World Cup?",  # every value in the request
        "How did Die Mannschaft do in the World Cup? (the team is Germany)",
    ],
)
def test_a_call_on_values_the_request_gives_runs(question: str) -> None:
    scripted = ScriptedEngine([reply("", MADE_UP), reply("Germany won all 7.")])
    result, stats = run(scripted, question)
    assert stats.ran == [{"team_name": "Germany", "tournament": "World Cup"}]
    assert "held_calls" not in result.metadata


def test_a_value_a_tool_returned_may_be_used_by_the_next_call() -> None:
    # 2014 is in no message of the user's: only in the first call's result.
    first = ("calculator", {"expression": "1954 + 60"})
    then = ("calculator", {"expression": "2014"})
    scripted = ScriptedEngine([reply("", first), reply("", then), reply("2014.")])
    result, _ = run(scripted, "What is 1954 + 60? Check the sum by evaluating it alone.")
    assert [r.content for r in result.tool_results] == ["2014", "2014"]
    assert "held_calls" not in result.metadata


def test_a_superscript_digit_in_the_request_is_read_not_a_crash() -> None:
    # "²" is a digit to str.isdigit() but not to float(): indexing the request for the
    # held-call check raised ValueError and ended the run before its first turn.
    call = ("calculator", {"expression": "5**2"})
    scripted = ScriptedEngine([reply("", call), reply("25.")])
    result, _ = run(scripted, "What is 5 ² (5 to the power 2)?")
    assert [r.content for r in result.tool_results] == ["25"]
    assert result.content == "25."


def test_the_hold_can_be_turned_off() -> None:
    scripted = ScriptedEngine([reply("", MADE_UP), reply("Germany won 7.")])
    result, stats = run(scripted, QUESTION, hold_ungrounded=False)
    assert len(stats.ran) == 1 and "held_calls" not in result.metadata


class BoilingPoint(BaseTool):
    spec = ToolSpec(  # type: ignore[assignment]
        "calculate_boiling_point",
        "Calculate the boiling point of a given substance at a given pressure.",
        {
            "type": "object",
            "properties": {"substance": {"type": "string"}, "pressure": {"type": "number"}},
            "required": ["substance"],
        },
    )

    def execute(self, **params: Any) -> str:
        raise AssertionError("a call on a foreign tool ran")


def test_a_name_passed_to_a_tool_foreign_to_the_request_is_held() -> None:
    question = "How many sides does a hexagon have?"
    call = ("calculate_boiling_point", {"substance": "hexagon", "pressure": 1.0})
    scripted = ScriptedEngine([reply("", call), reply("Six.")])
    agent = AgentRegistry.create(
        "orchestrator", scripted, "scripted", temperature=0, tools=[BoilingPoint()]
    )
    result = asyncio.run(agent.arun(question))
    assert result.content == "Six." and result.tool_results == []
    assert result.metadata["held_calls"] == [{"tool": "calculate_boiling_point", "unrelated": True}]
    assert "calculate_boiling_point does not do what the request asks" in (
        scripted.calls[1].messages[-1].content
    )


class Clock(BaseTool):
    """mcp-server-time's two tools, as a model sees them."""

    def __init__(self, name: str, properties: dict[str, Any], answer: str) -> None:
        what = (
            "Convert time between timezones."
            if "convert" in name
            else ("Get the current time in a specific timezone.")
        )
        self._spec = ToolSpec(
            name, what, {"type": "object", "properties": properties, "required": list(properties)}
        )
        self.answer = answer
        self.ran: list[dict[str, Any]] = []

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def execute(self, **params: Any) -> str:
        self.ran.append(params)
        return self.answer


def clocks() -> tuple[Clock, Clock]:
    text = {"type": "string"}
    return (
        Clock("time.get_current_time", {"timezone": text}, '{"datetime": "2026-11-29T02:05"}'),
        Clock("time.convert_time",
              {"source_timezone": text, "time": text, "target_timezone": text}, "converted"),
    )  # fmt: skip


INVENTED_TIME = ("time.convert_time",
                 {"source_timezone": "UTC", "time": "14:30", "target_timezone": "Asia/Tokyo"})  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_after_a_held_call_the_tools_that_need_no_made_up_value_answer(kind: str) -> None:
    # What 1.5B did with --tools 'time.*': "What time is it in Tokyo?" held as
    # convert_time(time="14:30"); the note read "14:30" back and the model answered it.
    current, convert = clocks()
    scripted = ScriptedEngine([
        reply("", INVENTED_TIME),
        reply("", ("time.get_current_time", {"timezone": "Asia/Tokyo"})),
        reply("It is 02:05 in Tokyo."),
    ])  # fmt: skip
    with engine_for(kind, scripted) as engine:
        agent = AgentRegistry.create(
            "orchestrator", engine, "scripted", temperature=0, tools=[current, convert]
        )
        result = asyncio.run(agent.arun("What time is it in Tokyo?"))
        if not isinstance(engine, ScriptedEngine):
            asyncio.run(engine.aclose())
    assert convert.ran == [] and current.ran == [{"timezone": "Asia/Tokyo"}]
    assert result.content == "It is 02:05 in Tokyo."
    assert result.metadata["held_calls"] == [
        {"tool": "time.convert_time", "invented": {"time": "14:30"}}
    ]
    second = scripted.calls[1]
    assert [t.name for t in second.tools] == ["time.get_current_time"]
    assert "14:30" not in "".join(m.content for m in second.messages)
    assert "the request does not give the time that time.convert_time needs" in (
        second.messages[-1].content
    )
    assert "14:30" not in "".join(m.content for call in scripted.calls for m in call.messages)


def test_with_no_other_tool_the_answer_turn_does_not_read_the_made_up_value_back() -> None:
    _, convert = clocks()
    scripted = ScriptedEngine([reply("", INVENTED_TIME), reply("I cannot tell the time.")])
    agent = AgentRegistry.create("orchestrator", scripted, "scripted", temperature=0,
                                 tools=[convert])  # fmt: skip
    result = asyncio.run(agent.arun("What time is it in Tokyo?"))
    assert convert.ran == [] and result.content == "I cannot tell the time."
    second = scripted.calls[1]
    assert second.tools == ()
    assert "14:30" not in "".join(m.content for m in second.messages)
