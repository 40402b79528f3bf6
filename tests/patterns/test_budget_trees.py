"""Budgets hold across whole trees of patterns: over random trees and caps, the run
never makes more engine calls or tool calls than its caps allow, however the members
nest and run at once (they all spend the one ledger of the run)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jarvisd._errors import PatternError
from jarvisd._messages import Generation, Message, Role, ToolSpec
from jarvisd._runcontext import Budget, BudgetExceeded, RunContext
from jarvisd.agents import OrchestratorAgent, SimpleAgent
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.patterns import AgentMember, Member, Network, Parallel, Reflective
from jarvisd.tools import CalculatorTool

Tree = Any


def _tool_then_answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
    if any(m.role is Role.TOOL for m in messages):
        return reply("The answer is 4.")
    return reply("", ("calculator", {"expression": "2+2"}), ("calculator", {"expression": "1+3"}))


class Counter:
    def __init__(self) -> None:
        self.engines: list[ScriptedEngine] = []
        self.names = 0

    def engine(self, **kw: Any) -> ScriptedEngine:
        engine = ScriptedEngine(**kw)
        self.engines.append(engine)
        return engine

    def name(self) -> str:
        self.names += 1
        return f"m{self.names}"

    @property
    def calls(self) -> int:
        return sum(len(e.calls) for e in self.engines)


def build(tree: Tree, counter: Counter) -> Member:
    kind = tree[0]
    if kind == "simple":
        return AgentMember(SimpleAgent(counter.engine(fallback=reply("ok"))), counter.name())
    if kind == "tools":
        agent = OrchestratorAgent(counter.engine(fallback=_tool_then_answer),
                                  tools=[CalculatorTool()], max_turns=3)  # fmt: skip
        return AgentMember(agent, counter.name())
    children = [build(c, counter) for c in tree[1]]
    if kind == "parallel":
        return Parallel(children, name=counter.name())
    if kind == "network":
        return Network(children, rounds=2, name=counter.name())
    return Reflective(children[0], children[-1], max_rounds=2, name=counter.name())


leaves = st.sampled_from([("simple",), ("tools",)])
trees = st.recursive(
    leaves,
    lambda inner: st.tuples(
        st.sampled_from(["parallel", "network", "reflective"]),
        st.lists(inner, min_size=1, max_size=4),
    ),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(tree=trees, max_calls=st.integers(1, 12), max_tool_calls=st.integers(1, 8))
def test_call_and_tool_call_caps_hold_across_any_tree(
    tree: Tree, max_calls: int, max_tool_calls: int
) -> None:
    counter = Counter()
    root = build(tree, counter)
    budget = Budget(max_calls=max_calls, max_tool_calls=max_tool_calls)
    tool_calls: list[int] = []

    async def go() -> None:
        run = RunContext(budget=budget)
        run.bus.subscribe(
            lambda e: tool_calls.append(1) if e.type.value == "tool_call_start" else None
        )
        try:
            await root.arun("q", run=run)
        except (BudgetExceeded, PatternError):
            pass  # a member stopped by the budget fails its pattern: both are fine here

    asyncio.run(go())
    assert counter.calls <= max_calls
    assert budget.calls <= max_calls
    assert len(tool_calls) <= max_tool_calls and budget.tool_calls <= max_tool_calls
