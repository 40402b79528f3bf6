"""Tool plans: a DAG of steps with $ref, run in waves; cycles refused; dependents of a
failed step skipped."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jarvisd._errors import PatternError
from jarvisd._events import EventType
from jarvisd._messages import ToolResult, ToolSpec
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.patterns import ToolPlan, ToolPlanner, execute_plan
from jarvisd.tools import BaseTool, CalculatorTool, ToolDispatcher

from ._helpers import Recorder, go


class Echo(BaseTool):
    blocking = False

    def __init__(self) -> None:
        self.seen: list[str] = []

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            "echo", "echoes", {"type": "object", "properties": {"text": {"type": "string"}}}
        )

    def execute(self, **params: Any) -> ToolResult:
        text = str(params.get("text", ""))
        self.seen.append(text)
        if text.startswith("fail"):
            return ToolResult("echo", "it failed", False)
        return ToolResult("echo", text.upper())


def plan(*steps: tuple[str, str, dict[str, Any]]) -> ToolPlan:
    return ToolPlan.from_json(
        {"steps": [{"id": i, "tool": t, "arguments": a} for i, t, a in steps]}, ["echo"]
    )


def test_waves_follow_the_references() -> None:
    p = plan(("c", "echo", {"text": "$ref:a $ref:b"}), ("a", "echo", {"text": "x"}),
             ("b", "echo", {"text": "y"}))  # fmt: skip
    assert [[s.id for s in wave] for wave in p.waves()] == [["a", "b"], ["c"]]
    echo = Echo()
    results = go(execute_plan(p, ToolDispatcher([echo]), Recorder().run()))
    assert results["c"].content == "X Y"
    assert list(results) == ["c", "a", "b"]  # plan order


@pytest.mark.parametrize(
    ("steps", "error"),
    [
        ([("a", "echo", {"text": "$ref:b"}), ("b", "echo", {"text": "$ref:a"})], "cycle"),
        ([("a", "echo", {"text": "$ref:a"})], "cycle"),
        ([("a", "echo", {"text": "$ref:zz"})], "unknown step 'zz'"),
        ([("a", "rm", {})], "unknown tool 'rm'"),
        ([("a", "echo", {}), ("a", "echo", {})], "used twice"),
    ],
)
def test_bad_plans_are_refused_before_anything_runs(steps: Any, error: str) -> None:
    with pytest.raises(PatternError, match=error):
        plan(*steps)


def test_a_step_that_depends_on_a_failed_step_is_skipped() -> None:
    p = plan(("a", "echo", {"text": "fail now"}), ("b", "echo", {"text": "$ref:a"}),
             ("c", "echo", {"text": "[$ref:b]"}), ("d", "echo", {"text": "free"}))  # fmt: skip
    echo = Echo()
    rec = Recorder()
    results = go(execute_plan(p, ToolDispatcher([echo]), rec.run()))
    assert echo.seen == ["fail now", "free"]  # b and c never ran
    assert results["b"].metadata["skipped"] and results["c"].metadata["skipped"]
    assert "step 'a'" in results["b"].content and "step 'b'" in results["c"].content
    assert results["d"].content == "FREE"
    statuses = {(s["step"], s["status"]) for s in rec.of(EventType.STEP)}
    assert {("a", "failed"), ("b", "skipped"), ("c", "skipped"), ("d", "done")} <= statuses


def test_planner_plans_runs_and_answers() -> None:
    the_plan = {"steps": [
        {"id": "x", "tool": "calculator", "arguments": {"expression": "6*7"}},
        {"id": "y", "tool": "calculator", "arguments": {"expression": "$ref:x + 1"}},
    ]}  # fmt: skip
    engine = ScriptedEngine(script=[
        reply("a plan: {not json"),  # refused once, asked again with the reason
        reply("```json\n" + json.dumps(the_plan) + "\n```"),
        reply("It is 43."),
    ])  # fmt: skip
    result = go(ToolPlanner(engine, [CalculatorTool()]).arun("what is 6*7+1?"))
    assert result.content == "It is 43."
    assert [r.content for r in result.tool_results] == ["42", "43"]
    assert "cannot be used" in engine.calls[1].messages[-1].content
    assert "- y (calculator): 43" in engine.calls[2].messages[-1].content


def test_ref_substitution_is_bounded() -> None:
    from jarvisd.patterns._toolplan import MAX_ARGUMENT_CHARS

    big = "x" * 15_000
    p = plan(("a", "echo", {"text": big}), ("b", "echo", {"text": " ".join(["$ref:a"] * 10)}),
             ("c", "echo", {"text": "$ref:b"}))  # fmt: skip
    echo = Echo()
    results = go(execute_plan(p, ToolDispatcher([echo]), Recorder().run()))
    assert len(echo.seen) == 1  # b never ran, c was skipped
    assert f"at most {MAX_ARGUMENT_CHARS}" in results["b"].content
    assert results["c"].metadata["skipped"]
