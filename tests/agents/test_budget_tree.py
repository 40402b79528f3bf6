"""One ledger and one cancel token across a whole tree of agents.

Agents nested at any depth (gathered with ``run.child()``, inside tool calls, rlm's
``llm_batch``) spend at once on a :class:`MeteredEngine`, which spends the most a prompt
may cost and keeps the truth: no cap (prompt and completion tokens, engine calls, tool
calls) is ever passed, and the ledger ends equal to what was really spent.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jarvisd._events import Event, EventType
from jarvisd._messages import Generation, Message, Role, ToolCall, ToolSpec, Usage
from jarvisd._runcontext import Budget, BudgetExceeded, Cancelled, RunContext, RunStopped
from jarvisd.agents import AgentContext, AgentRegistry
from jarvisd.executors import SubprocessExecutor
from jarvisd.testing import MeteredEngine
from jarvisd.tools import BaseTool, current_run

CAP = 50_000
CONTEXT = "".join(f"Line {i}: nothing to see here.\n" for i in range(600))


def spend(content: str, tokens: int, *calls: ToolCall) -> Generation:
    """A reply ``tokens`` long (the MeteredEngine pads it), with these tool calls."""
    return Generation(content, tuple(calls), Usage(0, tokens))


class Work(BaseTool):
    """A tool that takes ``delay`` seconds and returns a new result each time."""

    tool_id = "work"
    spec = ToolSpec("work", "does some work", {"type": "object", "properties": {"n": {"type": "integer"}}})  # type: ignore[assignment]  # fmt: skip

    def __init__(self, tally: Tally, delay: float = 0.0) -> None:
        self.tally = tally
        self.delay = delay

    async def execute(self, **params: Any) -> str:
        self.tally.tools_started += 1
        await asyncio.sleep(self.delay)
        self.tally.tools_finished += 1
        return f"work item {params.get('n')} done"


@dataclass
class Tally:
    tools_started: int = 0
    tools_finished: int = 0
    ids: itertools.count[int] = field(default_factory=itertools.count)

    def count_repl(self, event: Event) -> None:
        # rlm's repl tool is jarvis's own: its start is known from its event.
        if event.data.get("tool") == "repl":
            self.tools_started += 1


def turns_done(messages: Sequence[Message]) -> int:
    return sum(1 for m in messages if m.role is Role.ASSISTANT)


def make_member(engine: MeteredEngine, name: str, tally: Tally, **kw: Any) -> Any:
    return AgentRegistry.create(
        "orchestrator", engine, "", tools=[Work(tally, kw.pop("delay", 0.0)), *kw.pop("tools", [])],
        system_prompt=f"You are {name}.", temperature=0, **kw,
    )  # fmt: skip


def script(tally: Tally, *, turns: int, tokens: int, calls: int = 1, batch: int = 8) -> Any:
    """Answers members (``turns`` turns of ``calls`` work calls, each reply ``tokens``
    long), rlm's root (one cell with an ``llm_batch`` of ``batch`` prompts, then FINAL)
    and rlm's sub-calls (``tokens`` long)."""

    def respond(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        system = messages[0].content if messages[0].role is Role.SYSTEM else ""
        done = turns_done(messages)
        if "REPL" in system:
            if done == 0:
                cell = f"answers = llm_batch(['Look at: ' + context[i*500:(i+1)*500] for i in range({batch})])\nprint(len(answers))"
                return spend(f"```python\n{cell}\n```", tokens)
            return spend("```python\nFINAL('found')\n```", tokens)
        if not system:  # an llm_batch sub-call
            return spend("nothing here", tokens)
        if done < turns:
            work = [ToolCall.from_arguments("work", {"n": next(tally.ids)}) for _ in range(calls)]
            return spend("", tokens, *work)
        return spend("all done", tokens)

    return respond


def rlm(engine: MeteredEngine, tokens: int) -> Any:
    return AgentRegistry.create(
        "rlm", engine, "", temperature=0, executor=SubprocessExecutor(), max_tokens=tokens,
        sub_max_tokens=tokens, exec_timeout=120,
    )  # fmt: skip


async def five_members_and_an_llm_batch(
    engine: MeteredEngine, run: RunContext, tally: Tally, tokens: int, delay: float = 0.0
) -> list[Any]:
    # Members work at different paces: when the run stops, some are inside tools.
    members = [
        make_member(engine, f"member {i}", tally, delay=delay * i, max_tokens=tokens)
        for i in range(5)
    ]
    run.bus.subscribe(tally.count_repl, EventType.TOOL_CALL_START)
    work = [m.arun(f"task {i}", run=run.child()) for i, m in enumerate(members)]
    work.append(
        rlm(engine, tokens).arun(
            "find it", AgentContext(metadata={"context": CONTEXT}), run=run.child()
        )
    )
    return list(await asyncio.gather(*work, return_exceptions=True))


def assert_ledger_is_the_truth(run: RunContext, engine: MeteredEngine, tally: Tally) -> None:
    budget = run.budget
    assert budget.held_tokens == 0
    assert budget.used == engine.spent
    assert budget.calls == engine.calls
    assert budget.tool_calls == tally.tools_started


@pytest.mark.timeout(60)
def test_a_50k_token_cap_holds_with_five_members_and_an_llm_batch_spending_at_once() -> None:
    tally = Tally()
    engine = MeteredEngine(script(tally, turns=8, tokens=3000), latency_s=0.01)
    run = RunContext(budget=Budget(max_tokens=CAP))
    results = asyncio.run(five_members_and_an_llm_batch(engine, run, tally, tokens=3000))
    # The run wanted far more (5 members of 8 turns, 8 sub-calls, 3000 tokens each) and
    # was stopped; every member still running stopped with it.
    assert all(isinstance(r, BudgetExceeded) for r in results[:5]), results
    assert not isinstance(results[5], Exception) or isinstance(results[5], BudgetExceeded)
    assert all("token budget of 50000 spent" in str(r) for r in results[:5])
    # How far below the cap the run ends depends on how many calls were in flight when
    # it stopped (they are cut short: their completions are never made); never above.
    assert engine.spent.total_tokens <= CAP, engine.spent
    assert engine.spent.prompt_tokens > 0
    assert_ledger_is_the_truth(run, engine, tally)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cap", ["max_calls", "max_tool_calls"])
def test_call_and_tool_call_caps_hold_and_stop_every_member_at_once(cap: str) -> None:
    tally = Tally()
    engine = MeteredEngine(script(tally, turns=8, tokens=50, calls=3), latency_s=0.01)
    run = RunContext(budget=Budget(**{cap: 20}))  # type: ignore[arg-type]
    # Work takes a while: when the cap is reached, other members are inside tool calls.
    results = asyncio.run(five_members_and_an_llm_batch(engine, run, tally, 50, delay=0.3))
    stopped = [r for r in results if isinstance(r, BudgetExceeded)]
    assert len(stopped) >= 3 and all(s.args == stopped[0].args for s in stopped), results
    assert not any(isinstance(r, Exception) and r not in stopped for r in results), results
    assert (engine.calls if cap == "max_calls" else tally.tools_started) == 20
    # A hard stop: the tool calls in flight were stopped with the run, not waited for.
    assert tally.tools_finished < tally.tools_started
    assert_ledger_is_the_truth(run, engine, tally)


def test_the_soft_warning_comes_once_before_the_hard_stop() -> None:
    tally = Tally()
    engine = MeteredEngine(script(tally, turns=30, tokens=100), latency_s=0.001)
    run = RunContext(budget=Budget(max_calls=12, warn_at=0.5))
    events: list[Event] = []
    run.bus.subscribe(events.append)
    with pytest.raises(BudgetExceeded, match="call budget of 12"):
        asyncio.run(make_member(engine, "solo", tally, max_turns=30).arun("go", run=run))
    warnings = [e for e in events if e.type is EventType.BUDGET_WARNING]
    assert [w.data["dimension"] for w in warnings] == ["calls"]
    assert warnings[0].data["used"] == 6 and warnings[0].data["limit"] == 12
    stop = events.index(warnings[0])
    # Published as the sixth call reserved its place, before it started.
    assert sum(e.type is EventType.INFERENCE_START for e in events[:stop]) == 5


@pytest.mark.timeout(30)
def test_a_refused_call_inside_llm_batch_stops_the_run_at_once() -> None:
    # Before the hard stop went through the token, a refused sub-call left the REPL
    # waiting for its answer until the cell's timeout (120 s here).
    tally = Tally()
    engine = MeteredEngine(script(tally, turns=1, tokens=20, batch=8), latency_s=0.01)
    run = RunContext(budget=Budget(max_calls=4))
    run.bus.subscribe(tally.count_repl, EventType.TOOL_CALL_START)
    with pytest.raises(BudgetExceeded, match="call budget of 4"):
        asyncio.run(
            rlm(engine, 20).arun("find", AgentContext(metadata={"context": CONTEXT}), run=run)
        )
    assert engine.calls == 4
    assert_ledger_is_the_truth(run, engine, tally)


class Delegate(BaseTool):
    """A tool that runs sub-agents concurrently, each under ``run.child()``."""

    tool_id = "delegate"
    spec = ToolSpec("delegate", "hands work to a team")  # type: ignore[assignment]

    def __init__(self, team: Sequence[tuple[Any, str]], tally: Tally) -> None:
        self.team = team
        self.tally = tally

    async def execute(self, **params: Any) -> str:
        self.tally.tools_started += 1
        run = current_run()
        assert run is not None
        # return_exceptions: a member's stop is re-raised here, and never left in a
        # gather nobody reads when this call is cancelled at the same moment.
        results = await asyncio.gather(
            *(agent.arun(task, run=run.child()) for agent, task in self.team),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return "; ".join(r.content for r in results)  # type: ignore[union-attr]


def test_a_cancel_reaches_a_member_inside_a_tool_call_and_its_call_gets_a_result() -> None:
    tally = Tally()
    engine = MeteredEngine(script(tally, turns=1, tokens=5), latency_s=0.01)
    run = RunContext()
    states: list[dict[str, Any]] = []
    # The member keeps its own checkpoint (what a pattern would keep), sharing the token.
    member_run = RunContext(run.bus, run.budget, run.cancel, depth=2,
                            checkpoint=lambda s: states.append(dict(s)))  # fmt: skip

    class Team(BaseTool):
        tool_id = "delegate"
        spec = ToolSpec("delegate", "hands work to a team")  # type: ignore[assignment]

        async def execute(self, **params: Any) -> str:
            member = make_member(engine, "member", tally, delay=60)
            return (await member.arun("slow work", run=member_run)).content

    def lead(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if turns_done(messages) == 0:
            return spend("", 5, ToolCall.from_arguments("delegate", {}))
        return spend("done", 5)

    top = AgentRegistry.create(
        "orchestrator", MeteredEngine(lead), "", tools=[Team()], system_prompt="lead"
    )
    top_states: list[dict[str, Any]] = []
    run.checkpoint = lambda s: top_states.append(dict(s))

    async def go() -> None:
        asyncio.get_running_loop().call_later(0.5, run.cancel.cancel, "user stop")
        await top.arun("x", run=run)

    with pytest.raises(Cancelled, match="user stop"):
        asyncio.run(go())
    assert tally.tools_started == 1 and tally.tools_finished == 0
    for saved in (states[-1], top_states[-1]):
        messages = [Message.from_dict(m) for m in saved["messages"]]
        calls = {c.id for m in messages for c in m.tool_calls}
        answered = {m.tool_call_id: m.content for m in messages if m.role is Role.TOOL}
        assert calls and set(answered) == calls
        assert all(text.startswith("Cancelled") for text in answered.values())


# -- random trees of nested agents -------------------------------------------------


@dataclass
class Node:
    turns: int
    tokens: int
    calls: int
    children: list[Node]


def nodes(depth: int = 0) -> st.SearchStrategy[Node]:
    children = (
        st.just([]) if depth >= 2 else st.lists(st.deferred(lambda: nodes(depth + 1)), max_size=3)
    )
    return st.builds(Node, st.integers(1, 3), st.integers(1, 600), st.integers(1, 3), children)


class Tree:
    """Agents for a tree of :class:`Node`: each an orchestrator whose first turn
    delegates to its children (all at once, as ``run.child()``) next to its work calls."""

    def __init__(self, roots: Sequence[Node]) -> None:
        self.tally = Tally()
        self.by_name: dict[str, Node] = {}
        self.engine = MeteredEngine(self.respond, latency_s=0.001)
        self.roots = [self.agent(node) for node in roots]

    def agent(self, node: Node) -> Any:
        name = f"node {len(self.by_name)}"
        self.by_name[name] = node
        team = [(self.agent(child), "subtask") for child in node.children]
        tools = [Delegate(team, self.tally)] if team else []
        return make_member(self.engine, name, self.tally, tools=tools, max_turns=5)

    def respond(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        system = messages[0].content
        node = self.by_name[system[system.index("You are node ") + 8 :].split(".")[0]]
        done = turns_done(messages)
        if done >= node.turns:
            return spend("finished", node.tokens)
        work = [
            ToolCall.from_arguments("work", {"n": next(self.tally.ids)}) for _ in range(node.calls)
        ]
        if done == 0 and node.children:
            work[0] = ToolCall.from_arguments("delegate", {})
        return spend("", node.tokens, *work)


caps = st.one_of(st.none(), st.integers(1, 40))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    roots=st.lists(nodes(), min_size=1, max_size=4),
    max_tokens=st.one_of(st.none(), st.integers(300, 30_000)),
    max_calls=caps,
    max_tool_calls=caps,
)
def test_random_trees_of_nested_agents_never_pass_a_cap_and_the_ledger_is_the_truth(
    roots: list[Node], max_tokens: int | None, max_calls: int | None, max_tool_calls: int | None
) -> None:
    tree = Tree(roots)
    run = RunContext(budget=Budget(max_tokens, max_calls, max_tool_calls))

    async def go() -> list[Any]:
        work = [agent.arun("task", run=run.child()) for agent in tree.roots]
        return list(await asyncio.gather(*work, return_exceptions=True))

    results = asyncio.run(go())
    for result in results:
        assert not isinstance(result, BaseException) or isinstance(result, RunStopped), result
    engine, tally = tree.engine, tree.tally
    if max_tokens is not None:
        assert engine.spent.total_tokens <= max_tokens
    if max_calls is not None:
        assert engine.calls <= max_calls
    if max_tool_calls is not None:
        assert tally.tools_started <= max_tool_calls
    assert_ledger_is_the_truth(run, engine, tally)
