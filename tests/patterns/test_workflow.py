"""AG2-style routing: typed handoffs from delegate tools, FromSpeaker rules, terminate
targets, first-emitted-wins, max turns."""

from __future__ import annotations

from typing import Any

import pytest

from jarvisd._errors import PatternError
from jarvisd._events import EventType
from jarvisd._messages import ToolResult, ToolSpec
from jarvisd.engines import reply
from jarvisd.patterns import AgentTarget, FromSpeaker, TerminateTarget, Workflow, route_to
from jarvisd.tools import BaseTool

from ._helpers import Recorder, engine_of, go, simple, tool_agent


def test_rules_route_speakers_until_a_terminate_target() -> None:
    research, write = simple("researcher", "notes: 3 facts"), simple("writer", "The essay.")
    flow = Workflow([research, write], [
        FromSpeaker("researcher", AgentTarget("writer")),
        FromSpeaker("writer", TerminateTarget()),
    ])  # fmt: skip
    result = go(flow.arun("write an essay"))
    assert result.content == "The essay." and result.metadata["turns"] == 2
    assert result.provenance.path == ("workflow", "writer")
    # The writer sees the researcher's words in the shared transcript.
    assert "[researcher] notes: 3 facts" in [m.content for m in engine_of(write).calls[0].messages]


def test_a_delegate_tool_handoff_overrides_the_rules_and_the_first_emitted_wins() -> None:
    triage = tool_agent([reply(
        "",
        ("delegate_to_billing", {"reason": "refund"}),
        ("delegate_to_tech", {"reason": "also maybe"}),
    )])  # fmt: skip
    billing, tech = simple("billing", "Refunded."), simple("tech", "never")
    flow = Workflow(
        {"triage": triage, "billing": billing, "tech": tech},
        [FromSpeaker("triage", AgentTarget("tech"))],  # overridden by the handoff
    )
    rec = Recorder()
    result = go(flow.arun("I was charged twice", run=rec.run()))
    assert result.content == "Refunded."
    assert engine_of(tech).calls == []
    assert [(h["source"], h["target"], h["reason"]) for h in rec.of(EventType.HANDOFF)] == [
        ("triage", "billing", "refund")
    ]
    # The triage agent's turn ended after the reply that handed off: one model call.
    assert len(triage.engine.calls) == 1  # type: ignore[attr-defined]


class Escalate(BaseTool):
    blocking = False

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec("escalate", "escalates")

    def execute(self, **params: Any) -> ToolResult:
        return route_to("tech", "needs an engineer", tool="escalate")


def test_any_tool_can_return_a_typed_handoff() -> None:
    triage = tool_agent([reply("", ("escalate", {}))], [Escalate()])
    flow = Workflow({"triage": triage, "tech": simple("tech", "Fixed.")}, [])
    assert go(flow.arun("broken")).content == "Fixed."


def test_max_turns_ends_a_loop_with_an_error() -> None:
    ping, pong = simple("ping", "a", "b", "c"), simple("pong", "x", "y", "z")
    flow = Workflow([ping, pong], [
        FromSpeaker("ping", AgentTarget("pong")), FromSpeaker("pong", AgentTarget("ping")),
    ], max_turns=3)  # fmt: skip
    result = go(flow.arun("go"))
    assert not result.success and "limit of 3 turns" in result.error
    assert len(engine_of(ping).calls) == 2 and len(engine_of(pong).calls) == 1


@pytest.mark.parametrize(
    ("rules", "error"),
    [
        ([FromSpeaker("ghost", TerminateTarget())], "unknown speaker 'ghost'"),
        ([FromSpeaker("a", AgentTarget("ghost"))], "unknown speaker 'ghost'"),
        ([FromSpeaker("a", TerminateTarget()), FromSpeaker("a", TerminateTarget())], "two rules"),
    ],
)
def test_bad_rules_are_refused(rules: list[FromSpeaker], error: str) -> None:
    with pytest.raises(PatternError, match=error):
        Workflow([simple("a")], rules)
