"""The member interface, provenance, events, handoffs, sub-agent tools and contracts."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from jarvisd._errors import PatternError
from jarvisd._events import EventType
from jarvisd._messages import Role
from jarvisd.agents import AgentContext, SimpleAgent
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.patterns import (
    AgentTool,
    Handoff,
    Provenance,
    WithHandoffs,
    parse_as,
    returns,
)
from jarvisd.patterns._contracts import ContractError
from jarvisd.tools import CalculatorTool

from ._helpers import Recorder, engine_of, go, simple, tool_agent


@dataclasses.dataclass
class Refund:
    order: str
    amount: float


def test_an_agent_member_produces_its_own_result() -> None:
    result = go(simple("writer", "hello").arun("hi"))
    assert result.content == "hello"
    assert result.provenance == Provenance("writer", False, ("writer",))


def test_handoff_forks_the_context_and_answers_the_call_with_a_synthetic_result() -> None:
    billing = simple("billing", '{"order": "A7", "amount": 12.5}')
    sales = simple("sales", "never asked")
    source = tool_agent(
        [
            reply(
                "",
                ("transfer_to_billing", {"reason": "it is about a refund"}),
                ("transfer_to_sales", {"reason": "second handoff of the turn"}),
            )
        ]
    )
    front = WithHandoffs(
        source, [Handoff.to(billing, output_type=Refund), Handoff.to(sales)], name="front"
    )
    rec = Recorder()
    result = go(front.arun("refund order A7", run=rec.run()))

    assert result.success, result.error
    assert result.output == Refund("A7", 12.5)
    assert result.provenance == Provenance("billing", True, ("front", "billing"))
    assert engine_of(sales).calls == []  # only the first handoff of a turn is taken
    assert rec.of(EventType.HANDOFF) == [
        {"pattern": "front", "depth": 0, "source": "front", "target": "billing",
         "reason": "it is about a refund"}
    ]  # fmt: skip
    (call,) = engine_of(billing).calls
    history = list(call.messages)
    assert history[-1].role is Role.USER
    assert history[-1].content.startswith(
        "You have been transferred from front because it is about a refund."
    )
    assert "refund order A7" in history[-1].content
    # The forked history holds the handoff call and a result for each call in it.
    (assistant,) = [m for m in history if m.role is Role.ASSISTANT]
    answered = {m.tool_call_id for m in history if m.role is Role.TOOL}
    assert {c.id for c in assistant.tool_calls} == answered
    tool_texts = [m.content for m in history if m.role is Role.TOOL]
    assert "Transferred to billing." in tool_texts
    assert any(t.startswith("Not transferred") for t in tool_texts)


def test_a_handoff_answer_that_does_not_fit_its_type_fails() -> None:
    billing = simple("billing", "sure, refunded")
    source = tool_agent([reply("", ("transfer_to_billing", {"reason": "refund"}))])
    result = go(WithHandoffs(source, [Handoff.to(billing, output_type=Refund)]).arun("x"))
    assert not result.success
    assert "does not fit" in result.error


def test_without_a_handoff_the_source_answers_itself() -> None:
    billing = simple("billing")
    source = tool_agent([reply("I can answer that: 42.")])
    result = go(WithHandoffs(source, [billing], name="front").arun("x"))
    assert result.content == "I can answer that: 42."
    assert result.provenance == Provenance.own("front")


def test_a_handoff_needs_a_tool_using_source() -> None:
    with pytest.raises(PatternError, match="cannot hand off"):
        WithHandoffs(SimpleAgent(ScriptedEngine()), [simple("b")])  # type: ignore[arg-type]


@pytest.mark.parametrize("share", [True, False])
def test_sub_agent_tool_shares_history_and_state_only_when_asked(share: bool) -> None:
    seen: list[Any] = []

    def worker_reply(messages: Any, tools: Any) -> Any:
        seen.append([m.content for m in messages])
        return reply("worker says 7")

    from jarvisd.patterns import AgentMember

    worker = AgentMember(SimpleAgent(ScriptedEngine(fallback=worker_reply)), "worker")
    tool = AgentTool(worker, share_history=share, share_state=share)
    boss = tool_agent([reply("", ("worker", {"task": "count"})), reply("The count is 7.")], [tool])
    from jarvisd._messages import Message
    from jarvisd.patterns import call_member

    state: dict[str, Any] = {"k": 1}
    context = AgentContext(conversation=[Message.user("earlier words")], metadata={"state": state})
    rec = Recorder()
    result = go(call_member("top", AgentMember(boss, "boss"), "go", context, rec.run()))
    assert result.content == "The count is 7."
    assert ("earlier words" in seen[0]) is share
    starts = rec.of(EventType.MEMBER_START)
    assert [(s["pattern"], s["member"], s["depth"]) for s in starts] == [
        ("top", "boss", 1),
        ("agent", "worker", 2),
    ]
    tool_ctx = tool.context_for(context)
    assert (tool_ctx.metadata["state"] is state) is share
    assert (tool_ctx.conversation != []) is share


def test_returns_checks_the_answer_and_asks_once_more_with_the_error() -> None:
    member = simple("extract", "here you go", 'Sure: {"order": "B2", "amount": 3}')
    result = go(returns(member, Refund).arun("extract the refund"))
    assert result.output == Refund("B2", 3.0)
    assert result.metadata["contract_attempts"] == 2
    second = engine_of(member).calls[1].messages[-1].content
    assert "could not be used" in second and '"amount": float' in second


def test_returns_fails_after_its_retries() -> None:
    result = go(returns(simple("x", "no", "still no"), Refund).arun("q"))
    assert not result.success and "does not fit" in result.error


@pytest.mark.parametrize(
    ("kind", "text", "expected"),
    [
        (int, "```json\n42\n```", None),  # a bare number is not JSON object/array text
        (list[int], "[1, 2, 3]", [1, 2, 3]),
        (dict[str, float], '{"a": 1}', {"a": 1.0}),
        (str, "  words  ", "words"),
    ],
)
def test_parse_as(kind: Any, text: str, expected: Any) -> None:
    if expected is None:
        assert parse_as(kind, "42") == 42
        return
    assert parse_as(kind, text) == expected


@pytest.mark.parametrize(
    ("kind", "text", "where"),
    [
        (Refund, '{"order": "A"}', "missing field 'amount'"),
        (Refund, '{"order": "A", "amount": "ten"}', "value.amount: expected float"),
        (list[int], "[1, true]", r"value\[1\]: expected int"),
        (int, "no json", "no JSON value"),
    ],
)
def test_parse_as_names_what_does_not_fit(kind: Any, text: str, where: str) -> None:
    with pytest.raises(ContractError, match=where):
        parse_as(kind, text)


def test_calculator_tool_in_a_handoff_source_still_runs() -> None:
    # Tools of the source other than transfers keep working in the same turn.
    billing = simple("billing", "done")
    source = tool_agent(
        [reply("", ("calculator", {"expression": "2+2"}), ("transfer_to_billing", {}))],
        [CalculatorTool()],
    )
    result = go(WithHandoffs(source, [billing]).arun("x"))
    assert result.content == "done"
    assert result.tool_results[0].content == "4"
