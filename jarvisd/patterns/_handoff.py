"""Handoff: a terminal transfer of the conversation from one agent to another.

The source agent is offered one ``transfer_to_<target>`` tool per handoff. When it
calls one, that call gets a synthetic result at once (no call is ever left without a
result in the history), the source's loop ends, and the target continues in a forked
context: a copy of the source's history plus the message "You have been transferred
from X because ...". Only the first handoff of a turn is taken; any later one in the
same reply is answered "not transferred". The target's answer is the result (passed on,
so its provenance names the target), checked against the edge's ``output_type`` when
one is declared.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .._errors import PatternError
from .._events import EventType
from .._messages import Generation, Message, Role, ToolResult, ToolSpec
from .._runcontext import RunContext
from ..agents import AgentContext, AgentResult, ToolUsingAgent
from ..agents._toolloop import Dialect, LoopState, Step, run_tool_loop
from ..tools import BaseTool, ToolDispatcher
from ._base import Member, MemberLike, Pattern, Provenance, Result, as_member
from ._contracts import ContractError, describe, parse_as
from ._subagent import tool_name

__all__ = ["EndingDialect", "Handoff", "WithHandoffs", "run_recorded", "with_transfers"]


@dataclass(frozen=True, slots=True)
class Handoff:
    """One edge: where the conversation may go, when, and what must come back."""

    target: Member
    description: str = ""
    output_type: Any = None

    @classmethod
    def to(cls, target: MemberLike, description: str = "", output_type: Any = None) -> Handoff:
        return cls(as_member(target), description, output_type)

    @property
    def tool_name(self) -> str:
        return tool_name(f"transfer_to_{self.target.name}")


@dataclass(slots=True)
class _Taken:
    handoff: Handoff
    reason: str


class _Box:
    """The handoff taken in one run of the source (the first one only)."""

    __slots__ = ("taken",)

    def __init__(self) -> None:
        self.taken: _Taken | None = None


class _HandoffTool(BaseTool):
    blocking: ClassVar[bool] = False  # no I/O: records the transfer, runs inline

    def __init__(self, handoff: Handoff, box: _Box) -> None:
        self.handoff = handoff
        self.box = box

    @property
    def spec(self) -> ToolSpec:
        target = self.handoff.target.name
        return ToolSpec(
            self.handoff.tool_name,
            self.handoff.description or f"Transfer the conversation to {target}.",
            {
                "type": "object",
                "properties": {"reason": {"type": "string", "description": "Why transfer."}},
            },
        )

    def execute(self, **params: Any) -> ToolResult:
        reason = str(params.get("reason") or "")
        target = self.handoff.target.name
        if self.box.taken is not None:
            taken = self.box.taken.handoff.target.name
            return ToolResult(
                self.handoff.tool_name,
                f"Not transferred: this turn already transferred to {taken}.",
                False,
                metadata={"handoff_ignored": target},
            )
        self.box.taken = _Taken(self.handoff, reason.strip())
        return ToolResult(
            self.handoff.tool_name, f"Transferred to {target}.", metadata={"handoff": target}
        )


class EndingDialect(Dialect):
    """An agent's own dialect, except that its loop ends (with an empty answer) after
    a turn whose tool results ``ends`` says are final: a transfer was taken."""

    def __init__(self, inner: Dialect, ends: Callable[[Sequence[ToolResult]], bool]) -> None:
        self.inner = inner
        self.ends = ends
        self.offers_tools = inner.offers_tools  # type: ignore[misc]
        self.stop = inner.stop
        self.answer_so_far = inner.answer_so_far

    def system_prompt(self, executor: ToolDispatcher) -> str | None:
        return self.inner.system_prompt(executor)

    def parse(self, generation: Generation, executor: ToolDispatcher) -> Step:
        return self.inner.parse(generation, executor)

    def assistant_message(self, generation: Generation, step: Step) -> Message:
        return self.inner.assistant_message(generation, step)

    def result_messages(self, step: Step, results: Sequence[ToolResult]) -> list[Message]:
        return self.inner.result_messages(step, results)

    def corrective(self, step: Step) -> str:
        return self.inner.corrective(step)

    def final_from_results(self, results: Sequence[ToolResult]) -> str | None:
        if self.ends(results):
            return ""
        return self.inner.final_from_results(results)

    async def resume(self, state: LoopState, run: RunContext) -> None:
        await self.inner.resume(state, run)


def with_transfers(
    agent: ToolUsingAgent,
    tools: Sequence[BaseTool],
    ends: Callable[[Sequence[ToolResult]], bool],
) -> ToolUsingAgent:
    """A copy of ``agent`` with ``tools`` added, whose loop ends after a turn ``ends``
    accepts. A copy per run: the agent itself is shared and may run elsewhere at once."""
    clone = copy.copy(agent)
    clone.tools = [*agent.tools, *tools]
    clone._default_executor = None
    dialect = agent.dialect
    clone.dialect = lambda: EndingDialect(dialect(), ends)
    return clone


async def run_recorded(
    agent: ToolUsingAgent, input: str, context: AgentContext | None, run: RunContext
) -> tuple[AgentResult, list[Message]]:
    """Run ``agent``'s tool loop in ``run`` and return its result and its whole history
    (from the loop's checkpoints: every call in it has its result)."""
    history: list[Message] = []

    def capture(state: Mapping[str, Any]) -> None:
        history[:] = [Message.from_dict(m) for m in state.get("messages") or ()]

    own = dataclasses.replace(run, checkpoint=capture, resume=None, on_delta=None)
    setup = await agent._setup(input, context, own)
    try:
        outcome = await run_tool_loop(agent, setup, input, own)
    finally:
        if setup.close is not None:
            await setup.close()
    return outcome, history


def awareness(source: str, reason: str) -> str:
    because = reason or "the request is better handled by you"
    return f"You have been transferred from {source} because {because}."


class WithHandoffs(Pattern):
    """A tool-using agent that may hand the conversation to one of ``handoffs``."""

    kind = "handoffs"

    def __init__(
        self,
        agent: ToolUsingAgent,
        handoffs: Sequence[Handoff | MemberLike],
        *,
        name: str | None = None,
    ) -> None:
        if not isinstance(agent, ToolUsingAgent):
            raise PatternError(
                f"{type(agent).__name__} cannot hand off: only a tool-using agent can call "
                "a transfer tool"
            )
        super().__init__(name or agent.agent_id)
        self.agent = agent
        self.handoffs = [h if isinstance(h, Handoff) else Handoff.to(h) for h in handoffs]
        names = [h.tool_name for h in self.handoffs]
        clash = {n for n in names if names.count(n) > 1} | (
            set(names) & {t.spec.name for t in agent.tools}
        )
        if clash:
            raise PatternError(f"{self.name}: tool name {sorted(clash)[0]!r} is used twice")

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        box = _Box()
        source = with_transfers(
            self.agent,
            [_HandoffTool(h, box) for h in self.handoffs],
            lambda results: box.taken is not None,
        )
        outcome, history = await run_recorded(source, input, context, run)
        if box.taken is None:
            error = str(outcome.metadata.get("error") or "")
            return Result(
                outcome.content,
                Provenance.own(self.name),
                outcome.usage,
                error,
                tool_results=list(outcome.tool_results),
            )
        taken = box.taken
        target = taken.handoff.target
        self.emit(run, EventType.HANDOFF, source=self.name, target=target.name, reason=taken.reason)
        forked = AgentContext(
            conversation=[m for m in history if m.role is not Role.SYSTEM],
            tools=list(context.tools) if context else [],
            metadata=dict(context.metadata) if context else {},
        )
        ask = f"{awareness(self.name, taken.reason)}\n\nThe user's request: {input}"
        result = await self.call(target, ask, forked, run)
        result = result.passed_on(self.name, handoff=target.name, handoff_reason=taken.reason)
        result.usage = result.usage + outcome.usage
        result.tool_results = [*outcome.tool_results, *result.tool_results]
        if result.success and taken.handoff.output_type is not None:
            kind = taken.handoff.output_type
            try:
                result.output = parse_as(kind, result.content)
            except ContractError as exc:
                result.error = f"{target.name}'s answer does not fit {describe(kind)}: {exc}"
        return result
