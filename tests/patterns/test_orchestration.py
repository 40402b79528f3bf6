"""Router, Supervisor, Parallel, Network, Hierarchical on scripted engines."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jarvisd._errors import PatternError
from jarvisd._events import EventType
from jarvisd._messages import ToolResult, ToolSpec
from jarvisd._runcontext import Budget, BudgetExceeded
from jarvisd.agents import SimpleAgent
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.patterns import (
    AgentMember,
    Hierarchical,
    Network,
    Parallel,
    Provenance,
    Router,
    Supervisor,
    parse_choice,
)
from jarvisd.tools import BaseTool

from ._helpers import Recorder, engine_of, go, simple, tool_agent


def router(*replies: str, fallback: bool = True) -> tuple[Router, list[AgentMember]]:
    members = [simple("billing", "billing answer"), simple("tech", "tech answer")]
    backup = simple("general", "general answer") if fallback else None
    routes = [(members[0], "payments"), (members[1], "bugs")]
    return Router(ScriptedEngine.from_replies(replies), routes, fallback=backup), members


@pytest.mark.parametrize(
    ("reply_text", "expected"),
    [("2", "tech"), (" 1.", "billing"), ("<think>hmm 9</think>Route 2", "tech")],
)
def test_router_takes_the_number(reply_text: str, expected: str) -> None:
    pattern, _ = router(reply_text)
    rec = Recorder()
    result = go(pattern.arun("my app crashes", run=rec.run()))
    assert result.provenance == Provenance(expected, True, ("router", expected))
    (chosen,) = rec.of(EventType.ROUTE_CHOSEN)
    assert chosen["member"] == expected and chosen["fallback"] is False


@pytest.mark.parametrize("reply_text", ["0", "7", "billing please", ""])
def test_router_falls_back_when_the_reply_is_no_route(reply_text: str) -> None:
    pattern, members = router(reply_text)
    rec = Recorder()
    result = go(pattern.arun("hello", run=rec.run()))
    assert result.content == "general answer"
    assert rec.of(EventType.ROUTE_CHOSEN)[0]["fallback"] is True
    assert all(engine_of(m).calls == [] for m in members)


def test_router_without_fallback() -> None:
    unreadable, _ = router("banana", fallback=False)
    assert go(unreadable.arun("x")).content == "billing answer"  # the first route
    none, _ = router("0", fallback=False)
    result = go(none.arun("x"))
    assert not result.success and "no route" in result.error


def test_parse_choice_bounds() -> None:
    assert parse_choice("3", 3) == 3
    assert parse_choice("4", 3) is None
    assert parse_choice("99999999999", 3) is None
    assert parse_choice("none", 3) is None


class Blocking(BaseTool):
    """A tool that waits until cancelled, and says so."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = False

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec("wait", "waits")

    async def execute(self, **params: Any) -> ToolResult:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        raise AssertionError("unreachable")


class Gated(ScriptedEngine):
    """Answers only once ``gate`` is set."""

    def __init__(self, gate: asyncio.Event, text: str) -> None:
        super().__init__(fallback=reply(text))
        self.gate = gate

    async def generate(self, messages: Any, **kwargs: Any) -> Any:
        await self.gate.wait()
        return await super().generate(messages, **kwargs)


def test_run_first_returns_the_winner_and_cancels_the_losers() -> None:
    blocking = Blocking()
    in_tool = AgentMember(tool_agent([reply("", ("wait", {}))], [blocking]), "in_tool")
    slow = simple("slow", "too late", latency=60)

    async def scenario() -> Any:
        # The winner answers only once the other member is inside its tool call.
        fast = AgentMember(SimpleAgent(Gated(blocking.started, "fast answer")), "fast")
        rec = Recorder()
        result = await Parallel([slow, in_tool, fast], mode="first").arun("q", run=rec.run())
        # Seen as run_first returns, before asyncio.run's shutdown cancels leftovers.
        ends = {e["member"]: e for e in rec.of(EventType.MEMBER_END)}
        return result, blocking.cancelled, ends

    result, cancelled_in_tool, ends = go(scenario())
    assert result.content == "fast answer"
    assert result.provenance == Provenance("fast", True, ("parallel", "fast"))
    assert cancelled_in_tool  # the cancel reached a member inside a tool call
    assert ends["slow"]["error"] == "cancelled" and ends["in_tool"]["error"] == "cancelled"


def test_run_all_collects_every_answer_and_fails_on_any_failure() -> None:
    ok = Parallel([simple("a", "alpha"), simple("b", "beta")])
    result = go(ok.arun("q"))
    assert result.content == "## a\nalpha\n\n## b\nbeta"
    assert [m.provenance.producer for m in result.members] == ["a", "b"]
    assert result.provenance == Provenance.own("parallel")
    from jarvisd._errors import EngineError

    broken = AgentMember(SimpleAgent(ScriptedEngine(script=[EngineError("down")])), "broken")
    with pytest.raises(PatternError, match="member 'broken' failed: down"):
        go(Parallel([simple("a", "alpha", latency=30), broken]).arun("q"))


def test_run_and_synthesize() -> None:
    synth = simple("judge", "alpha and beta agree")
    pattern = Parallel([simple("a", "alpha"), simple("b", "beta")], mode="synthesize",
                       synthesizer=synth)  # fmt: skip
    result = go(pattern.arun("q"))
    assert result.content == "alpha and beta agree"
    assert result.provenance.path == ("parallel", "judge")
    asked = engine_of(synth).calls[0].messages[-1].content
    assert "## a\nalpha" in asked and "## b\nbeta" in asked


def test_parallel_timeout_fails_the_stragglers() -> None:
    pattern = Parallel([simple("a", "x", latency=60)], timeout=0.05)
    with pytest.raises(PatternError, match=r"a did not finish within 0\.05 s"):
        go(pattern.arun("q"))


def test_parallel_members_share_the_run_budget() -> None:
    members = [simple(f"m{i}", "x") for i in range(5)]
    with pytest.raises(BudgetExceeded):
        go(Parallel(members).arun("q", run=Recorder().run(budget=Budget(max_calls=3))))
    assert sum(len(engine_of(m).calls) for m in members) == 3


def test_network_peers_speak_in_turn_over_a_shared_transcript() -> None:
    a, b = simple("a", "a1", "a2"), simple("b", "b1", "b2")
    synth = simple("synth", "final")
    rec = Recorder()
    result = go(Network([a, b], rounds=2, synthesizer=synth).arun("task", run=rec.run()))
    assert result.content == "final"
    assert [r["round"] for r in rec.of(EventType.ROUND)] == [1, 2]
    # b's second turn sees everything said before it, this round's a2 included.
    seen = [m.content for m in engine_of(b).calls[1].messages]
    assert seen[:3] == ["[a] a1", "[b] b1", "[a] a2"]
    assert [m.content for m in engine_of(synth).calls[0].messages][:4] == [
        "[a] a1", "[b] b1", "[a] a2", "[b] b2",
    ]  # fmt: skip
    replies = go(Network([simple("a", "yes"), simple("b", "no")]).broadcast("agree?"))
    assert [r.content for r in replies] == ["yes", "no"]


def test_supervisor_asks_its_workers_through_tools() -> None:
    worker = simple("researcher", "Paris")
    boss = Supervisor(ScriptedEngine(script=[
        reply("", ("researcher", {"task": "capital of France?"})),
        reply("The capital is Paris."),
    ]), [worker], name="lead")  # fmt: skip
    rec = Recorder()
    result = go(boss.arun("capital of France?", run=rec.run()))
    assert result.content == "The capital is Paris."
    assert result.provenance == Provenance.own("lead")
    assert result.metadata["delegations"] == [
        {"producer": "researcher", "delegated": False, "path": ["researcher"]}
    ]
    assert engine_of(worker).calls[0].messages[-1].content == "capital of France?"


def test_hierarchy_executive_departments_workers() -> None:
    worker = simple("coder", "def f(): pass")
    dept = Supervisor(ScriptedEngine(script=[
        reply("", ("coder", {"task": "write f"})), reply("engineering: f written"),
    ]), [worker], name="engineering")  # fmt: skip
    org = Hierarchical(ScriptedEngine(script=[
        reply("", ("send_to_department", {"department": "engineering", "task": "build f"})),
        reply("Done: f written."),
    ]), [dept], name="ceo")  # fmt: skip
    rec = Recorder()
    result = go(org.arun("build f", run=rec.run()))
    assert result.content == "Done: f written."
    starts = [(s["pattern"], s["member"], s["depth"]) for s in rec.of(EventType.MEMBER_START)]
    assert starts == [("ceo", "engineering", 1), ("engineering", "coder", 2)]
    direct = go(org.send_to_department("engineering", "again"))
    assert direct.provenance.path == ("ceo", "engineering")


def test_a_stop_signal_in_one_member_cancels_its_siblings_before_it_propagates() -> None:
    from jarvisd._runcontext import Cancelled
    from jarvisd.patterns import Provenance as P
    from jarvisd.patterns import Result
    from jarvisd.patterns._base import gather_all

    state = {"cancelled": False}

    async def stops() -> Result:
        await asyncio.sleep(0)
        raise Cancelled("stop")

    async def sibling() -> Result:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise
        return Result("", P.own("x"))

    async def scenario() -> bool:
        with pytest.raises(Cancelled):
            await gather_all([stops(), sibling()])
        return state["cancelled"]  # seen as gather_all raises, not at loop shutdown

    assert go(scenario())
