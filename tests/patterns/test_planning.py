"""Planning as configuration (Planned, PlanningConfig) and its complexity gate."""

from __future__ import annotations

import json

import pytest

from jarvisd._errors import PatternError
from jarvisd._events import EventType
from jarvisd._runcontext import Budget, BudgetExceeded
from jarvisd.engines import ScriptedEngine
from jarvisd.patterns import Plan, PlanItem, Planned, PlanningConfig, complexity

from ._helpers import Recorder, engine_of, go, simple

MULTI = "Research the moons of Mars, then write a summary, and finally review it."


def plan(*tasks: str) -> str:
    return json.dumps({"steps": [{"agent": "worker", "task": t} for t in tasks]})


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("What is 2 + 2?", 0),
        ("Refactor x = 1; y = 2; z = 3; w = 4 in my code", 0),  # semicolons are no signal
        ("Find the file, then fix it.", 1),
        ("Do these:\n1. fetch it\n2. parse it", 1),
        ("One. Two. Three.", 1),
        ("word " * 100, 1),
        (MULTI + " Keep it short. Cite sources.", 2),
        ("First:\n- fetch\n- parse\nThen report. Keep it short. Be exact. " + "x" * 500, 4),
    ],
)
def test_complexity_scores_each_signal_once(text: str, score: int) -> None:
    assert complexity(text) == score


def test_a_simple_input_skips_planning_entirely() -> None:
    worker = simple("worker", "4")
    planner = ScriptedEngine.from_replies([])
    rec = Recorder()
    gated = Planned(worker, PlanningConfig(enabled=True, engine=planner))
    result = go(gated.arun("What is 2 + 2?", run=rec.run()))
    assert result.content == "4" and result.metadata["planned"] is False
    assert result.provenance.path == ("planned", "worker")
    assert planner.calls == []  # not one planner call
    [gate] = rec.of(EventType.STEP)
    assert (gate["step"], gate["status"], gate["detail"]) == ("plan", "skipped", "0")


def test_disabled_planning_is_a_pass_through_even_for_complex_input() -> None:
    worker = simple("worker", "done")
    planner = ScriptedEngine.from_replies([])
    rec = Recorder()
    result = go(Planned(worker, PlanningConfig(engine=planner)).arun(MULTI, run=rec.run()))
    assert result.content == "done" and planner.calls == [] and rec.of(EventType.STEP) == []


def test_a_complex_input_plans_executes_each_step_and_synthesizes() -> None:
    worker = simple("worker", "moons: Phobos, Deimos", "summary: two moons", "review: fine")
    planner = ScriptedEngine.from_replies(
        [plan("research", "summarize", "review"), "Mars has two moons, Phobos and Deimos."]
    )
    rec = Recorder()
    gated = Planned(worker, PlanningConfig(enabled=True, engine=planner, min_complexity=2))
    result = go(gated.arun(MULTI + " Keep it short. Cite sources.", run=rec.run()))
    assert result.content == "Mars has two moons, Phobos and Deimos."
    assert result.provenance.producer == "planned"
    assert result.metadata["planning"] == {
        "plan": [{"agent": "worker", "task": t} for t in ("research", "summarize", "review")],
        "steps_executed": 3,
    }
    assert result.metadata["reasoning"] == "1. research\n2. summarize\n3. review"
    # context chaining: the third step sees the first two; synthesis sees every output
    third = engine_of(worker).calls[2].messages[-1].content
    assert "moons: Phobos, Deimos" in third and "summary: two moons" in third
    synthesis = planner.calls[1].messages[-1].content
    assert "review: fine" in synthesis and synthesis.startswith("Task: Research")
    # usage is aggregated across the planner, every step and the synthesis call
    parts = [m.usage.completion_tokens for m in result.members]
    assert len(planner.calls) + len(engine_of(worker).calls) == 5
    assert result.usage.completion_tokens == sum(parts) > parts[1]
    steps = [(s["step"], s["status"]) for s in rec.of(EventType.STEP)]
    assert steps[0] == ("plan", "done") and steps.count((3, "done")) == 1


def test_always_plans_even_a_simple_input() -> None:
    worker = simple("worker", "4")
    planner = ScriptedEngine.from_replies([plan("add"), "It is 4."])
    result = go(
        Planned(worker, PlanningConfig(enabled=True, engine=planner, always=True)).arun("2+2?")
    )
    assert result.content == "It is 4." and result.metadata["planned"] is True


def test_the_engine_defaults_to_the_agent_members_own() -> None:
    worker = simple("worker", plan("only step"), "step output", "final answer")
    result = go(Planned(worker, PlanningConfig(enabled=True, always=True)).arun("go"))
    assert result.content == "final answer"


def test_approval_can_reject_edit_or_accept_the_plan() -> None:
    seen: list[Plan] = []

    def reject(p: Plan) -> bool:
        seen.append(p)
        return False

    worker = simple("worker", "plain answer")
    planner = ScriptedEngine.from_replies([plan("a", "b")])
    cfg = PlanningConfig(
        enabled=True, engine=planner, always=True, auto_approve=False, approve=reject
    )
    result = go(Planned(worker, cfg).arun("x"))
    assert result.content == "plain answer" and result.metadata["rejected"] is True
    assert [s.task for s in seen[0].steps] == ["a", "b"]
    assert len(engine_of(worker).calls) == 1

    def edit(p: Plan) -> Plan:
        return Plan([PlanItem("worker", "only this")])

    worker = simple("worker", "did only this")
    planner = ScriptedEngine.from_replies([plan("a", "b"), "final"])
    cfg = PlanningConfig(
        enabled=True, engine=planner, always=True, auto_approve=False, approve=edit
    )
    result = go(Planned(worker, cfg).arun("x"))
    assert result.content == "final" and result.metadata["planning"]["steps_executed"] == 1
    assert "Your step: only this" in engine_of(worker).calls[0].messages[-1].content


def test_approval_handlers_are_checked() -> None:
    async def later(p: Plan) -> bool:
        return True

    with pytest.raises(PatternError, match="synchronous"):
        PlanningConfig(enabled=True, auto_approve=False, approve=later)
    with pytest.raises(PatternError, match="needs an approve handler"):
        PlanningConfig(enabled=True, auto_approve=False)

    async def coro() -> bool:
        return True

    def sneaky(p: Plan) -> object:
        return coro()  # a sync function handing back a coroutine

    planner = ScriptedEngine.from_replies([plan("a")])
    cfg = PlanningConfig(
        enabled=True, engine=planner, always=True, auto_approve=False, approve=sneaky
    )  # type: ignore[arg-type]
    with pytest.raises(PatternError, match="synchronous"):
        go(Planned(simple("worker", "x"), cfg).arun("x"))

    def wrong(p: Plan) -> object:
        return "yes"

    planner = ScriptedEngine.from_replies([plan("a")])
    cfg = PlanningConfig(
        enabled=True, engine=planner, always=True, auto_approve=False, approve=wrong
    )  # type: ignore[arg-type]
    with pytest.raises(PatternError, match="returned str"):
        go(Planned(simple("worker", "x"), cfg).arun("x"))


def test_the_planned_flow_spends_one_ledger() -> None:
    # planner + 3 steps + synthesis = 5 calls; a cap of 3 stops the flow inside it
    worker = simple("worker", "a", "b", "c")
    planner = ScriptedEngine.from_replies([plan("1", "2", "3"), "final"])
    rec = Recorder()
    gated = Planned(worker, PlanningConfig(enabled=True, engine=planner, always=True))
    with pytest.raises(BudgetExceeded):
        go(gated.arun("x", run=rec.run(budget=Budget(max_calls=3))))
    assert len(planner.calls) + len(engine_of(worker).calls) == 3


PLANNED_TEAM = """\
root = "careful"

[agents.worker]
agent = "simple"

[patterns.careful]
pattern = "planned"
member = "worker"
always = true
"""


def test_a_team_file_turns_planning_on_for_a_member() -> None:
    from jarvisd._config import Config
    from jarvisd._errors import UsageError
    from jarvisd._runcontext import RunContext
    from jarvisd.patterns import build_team, parse_team
    from jarvisd.runs import AgentSpec, run_spec

    team = parse_team(PLANNED_TEAM)
    assert parse_team(team.to_toml()) == team
    root = build_team(team, ScriptedEngine(), Config())
    assert isinstance(root, Planned) and root.planning.always and root.planning.enabled
    with pytest.raises(UsageError, match="min_complexity"):
        parse_team(PLANNED_TEAM + "min_complexity = -1\n")
    # one engine serves the planner, the step and the synthesis
    engine = ScriptedEngine.from_replies([plan("look it up"), "Phobos, Deimos", "Two moons."])
    spec = AgentSpec(input="moons of Mars?", team=PLANNED_TEAM)
    outcome = go(run_spec(spec, RunContext(), Config(), engine, trace=False))
    assert outcome.failure is None, outcome.failure
    assert outcome.answer == "Two moons."
