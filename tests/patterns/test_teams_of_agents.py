"""PlanAndExecute, Reflective, Debate, TeamLead, SelfCorrecting and Harness."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jarvisd._errors import EngineError, PatternError
from jarvisd._events import EventType
from jarvisd.agents import SimpleAgent
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.patterns import (
    AgentMember,
    Debate,
    Harness,
    PlanAndExecute,
    Provenance,
    Reflective,
    Result,
    SelfCorrecting,
    TeamLead,
)
from jarvisd.tools import CalculatorTool

from ._helpers import Recorder, engine_of, go, simple, tool_agent


def plan(*steps: tuple[str, str]) -> str:
    return json.dumps({"steps": [{"agent": a, "task": t} for a, t in steps]})


def test_plan_and_execute_chains_each_step_into_the_next() -> None:
    research, write = simple("research", "facts: 3 moons"), simple("write", "Mars-like: 3 moons.")
    planner = ScriptedEngine.from_replies([plan(("research", "find facts"), ("write", "write it"))])
    rec = Recorder()
    result = go(PlanAndExecute(planner, [research, write]).arun("describe", run=rec.run()))
    assert result.content == "Mars-like: 3 moons."
    assert result.provenance == Provenance("write", True, ("plan_and_execute", "write"))
    asked = engine_of(write).calls[0].messages[-1].content
    assert "- find facts (research): facts: 3 moons" in asked and "Your step: write it" in asked
    assert [(s["step"], s["status"]) for s in rec.of(EventType.STEP)] == [
        (1, "start"), (1, "done"), (2, "start"), (2, "done"),
    ]  # fmt: skip


def test_plan_and_execute_replans_after_a_failure_up_to_its_cap() -> None:
    broken = AgentMember(SimpleAgent(ScriptedEngine(script=[EngineError("down")])), "flaky")
    steady = simple("steady", "done by steady")
    planner = ScriptedEngine.from_replies([
        "not a plan",  # refused; asked again
        plan(("flaky", "try it")),
        plan(("steady", "do it instead")),
    ])  # fmt: skip
    result = go(PlanAndExecute(planner, [broken, steady], max_replans=1).arun("t"))
    assert result.content == "done by steady" and result.metadata["replans"] == 1
    assert "failed: down" in planner.calls[2].messages[-1].content
    capped = ScriptedEngine.from_replies([plan(("flaky", "a")), plan(("flaky", "b"))])
    broken2 = AgentMember(SimpleAgent(ScriptedEngine(fallback=EngineError("down"))), "flaky")
    with pytest.raises(PatternError, match="failed after 1 replans"):
        go(PlanAndExecute(capped, [broken2], max_replans=1).arun("t"))


def test_plan_and_execute_refuses_a_plan_naming_an_unknown_agent() -> None:
    planner = ScriptedEngine.from_replies([plan(("ghost", "x")), plan(("ghost", "y"))])
    with pytest.raises(PatternError, match="unknown agent 'ghost'"):
        go(PlanAndExecute(planner, [simple("real")]).arun("t"))


def test_reflective_revises_until_the_critic_approves() -> None:
    actor = simple("actor", "draft 1", "draft 2")
    critic = simple("critic", "too short", "APPROVED")
    rec = Recorder()
    result = go(Reflective(actor, critic).arun("write", run=rec.run()))
    assert result.content == "draft 2"
    assert result.metadata["approved"] is True and result.metadata["rounds"] == 2
    assert "too short" in engine_of(actor).calls[1].messages[-1].content
    assert [r["round"] for r in rec.of(EventType.ROUND)] == [1, 2]


def test_reflective_stops_at_max_rounds_unapproved() -> None:
    actor = simple("actor", "d1", "d2")
    critic = simple("critic", "no", "no")
    result = go(Reflective(actor, critic, max_rounds=2).arun("w"))
    assert result.content == "d2" and result.metadata["approved"] is False
    assert len(engine_of(actor).calls) == 2 and len(engine_of(critic).calls) == 2


def test_debate_rounds_then_judge() -> None:
    a, b = simple("pro", "yes 1", "yes 2"), simple("con", "no 1", "no 2")
    judge = simple("judge", "yes wins")
    result = go(Debate([a, b], judge, rounds=2).arun("should we?"))
    assert result.content == "yes wins" and result.provenance.path == ("debate", "judge")
    assert "[con] no 1" in engine_of(a).calls[1].messages[-1].content
    verdict_ask = engine_of(judge).calls[0].messages[-1].content
    assert "Round 2:\n[pro] yes 2\n[con] no 2" in verdict_ask


def test_team_lead_sequential_and_parallel() -> None:
    seq = TeamLead(ScriptedEngine(), [simple("a", "A"), simple("b", "B")])
    result = go(seq.arun("t"))
    assert result.content == "B" and result.provenance.path == ("team_lead", "b")
    lead = ScriptedEngine.from_replies(["A and B"])
    par = TeamLead(lead, [simple("a", "A"), simple("b", "B")], strategy="parallel")
    assert go(par.arun("t")).content == "A and B"
    assert "## a\nA\n\n## b\nB" in lead.calls[0].messages[-1].content


def test_team_lead_dynamic_respects_its_assignment_cap() -> None:
    worker = simple("w", "r1", "r2", "r3")
    lead = ScriptedEngine.from_replies([
        '{"assign": "w", "task": "one"}',
        '{"assign": "w", "task": "two"}',
        '{"assign": "w", "task": "three"}',  # over the cap of 2: told to answer
        '{"done": "final"}',
    ])  # fmt: skip
    result = go(TeamLead(lead, [worker], strategy="dynamic", max_assignments=2).arun("t"))
    assert result.content == "final" and result.metadata["assignments"] == 2
    assert len(engine_of(worker).calls) == 2
    assert "No more assignments" in lead.calls[3].messages[-1].content


def test_self_correcting_retries_in_the_same_conversation() -> None:
    member = simple("m", "7", "8")
    checked = SelfCorrecting(
        member, lambda r: None if r.content == "8" else "it must be even", max_retries=1
    )
    result = go(checked.arun("pick"))
    assert result.content == "8" and result.metadata["attempts"] == 2
    second = [m.content for m in engine_of(member).calls[1].messages]
    assert second[-3:] == ["pick", "7", "Your answer was not accepted: it must be even\n"
                           "Answer the request again, fixing that."]  # fmt: skip
    never = SelfCorrecting(simple("m", "1", "1"), lambda r: "no", max_retries=1)
    assert "rejected after 2 attempts: no" in go(never.arun("q")).error


def test_harness_hooks_and_report() -> None:
    seen: list[Any] = []
    agent = tool_agent(
        [reply("", ("calculator", {"expression": "2+3"})), reply("It is 5.")], [CalculatorTool()]
    )
    rec = Recorder()
    harness = Harness(
        AgentMember(agent, "calc"),
        before_run=lambda text: text + " (be brief)",
        after_run=lambda r: seen.append(("after", r.content)),
        before_tool=lambda d: seen.append(("before_tool", d["tool"])),
        after_tool=lambda d: seen.append(("after_tool", d["success"])),
    )
    result: Result = go(harness.arun("add 2 and 3", run=rec.run()))
    assert seen == [("before_tool", "calculator"), ("after_tool", True), ("after", "It is 5.")]
    report = json.loads(json.dumps(result.metadata["report"]))
    assert report["input"] == "add 2 and 3 (be brief)" and report["output"] == "It is 5."
    assert report["tool_calls"] == [
        {"tool": "calculator", "success": True, "latency_s": report["tool_calls"][0]["latency_s"]}
    ]
    # The run's own bus still sees the subtree's events.
    assert [e["tool"] for e in rec.of(EventType.TOOL_CALL_END)] == ["calculator"]
