"""AG2-style routing: speakers take turns; who speaks next is decided by a typed
handoff a speaker's tool returned, else by the routing rules, within ``max_turns``.

Rules are a transition graph: ``FromSpeaker("researcher", AgentTarget("writer"))``,
``FromSpeaker("writer", TerminateTarget())``. A speaker with no rule ends the workflow,
as a terminate target does: its reply is the answer. A tool-using speaker is offered
``delegate_to_<name>`` tools (one per other speaker); any tool may route by returning
:func:`route_to` (a :class:`ToolResult` carrying a typed :class:`RouteTo`). A handoff
overrides the rules. When a model emits several routing calls in one reply, the first
one it emitted wins (calls run at once; their results come back in call order), and
the speaker's turn ends after that reply. Every speaker sees the task and the
transcript so far.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .._errors import PatternError
from .._events import EventType
from .._messages import Message, ToolResult, ToolSpec
from .._runcontext import RunContext
from ..agents import AgentContext, ToolUsingAgent
from ..tools import BaseTool
from ._base import Member, MemberLike, Pattern, Provenance, Result, as_member, total_usage
from ._handoff import run_recorded, with_transfers
from ._subagent import tool_name

__all__ = [
    "AgentTarget",
    "FromSpeaker",
    "RouteTo",
    "TerminateTarget",
    "Workflow",
    "route_to",
]


@dataclass(frozen=True, slots=True)
class AgentTarget:
    name: str


@dataclass(frozen=True, slots=True)
class TerminateTarget:
    pass


@dataclass(frozen=True, slots=True)
class FromSpeaker:
    speaker: str
    target: AgentTarget | TerminateTarget


@dataclass(frozen=True, slots=True)
class RouteTo:
    """A typed handoff returned by a tool: speak next, and why."""

    target: str
    reason: str = ""


#: The ToolResult metadata key that carries a handoff, as JSON (results are stored and
#: sent as JSON); :func:`first_route` reads it back into a RouteTo.
_ROUTE = "route_to"


def route_to(target: str, reason: str = "", *, tool: str = "route") -> ToolResult:
    """A tool's result that hands the turn to ``target``."""
    return ToolResult(
        tool, f"Handing over to {target}.", metadata={_ROUTE: {"target": target, "reason": reason}}
    )


def first_route(results: Sequence[ToolResult]) -> RouteTo | None:
    """The handoff the model emitted first in one reply (results are in call order)."""
    for result in results:
        route = result.metadata.get(_ROUTE)
        if isinstance(route, Mapping) and isinstance(route.get("target"), str) and result.success:
            return RouteTo(route["target"], str(route.get("reason") or ""))
    return None


class _DelegateTool(BaseTool):
    blocking: ClassVar[bool] = False  # no I/O: returns the handoff, runs inline

    def __init__(self, target: str, description: str) -> None:
        self.target = target
        self.description = description

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            tool_name(f"delegate_to_{self.target}"),
            self.description or f"Hand the work over to {self.target}.",
            {"type": "object", "properties": {"reason": {"type": "string"}}},
        )

    def execute(self, **params: Any) -> ToolResult:
        return route_to(self.target, str(params.get("reason") or ""), tool=self.spec.name)


class Workflow(Pattern):
    kind = "workflow"

    def __init__(
        self,
        speakers: Sequence[MemberLike] | Mapping[str, MemberLike],
        rules: Sequence[FromSpeaker],
        *,
        start: str | None = None,
        max_turns: int = 10,
        descriptions: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        if isinstance(speakers, Mapping):
            items = list(speakers.items())
        else:
            items = [(_name(s), s) for s in speakers]
        if not items:
            raise PatternError("a workflow needs at least one speaker")
        self.speakers: dict[str, MemberLike] = {}
        for key, speaker in items:
            if key in self.speakers:
                raise PatternError(f"{self.name}: two speakers are named {key!r}")
            self.speakers[key] = speaker
        self.rules: dict[str, AgentTarget | TerminateTarget] = {}
        for rule in rules:
            if rule.speaker not in self.speakers:
                raise PatternError(f"{self.name}: rule from unknown speaker {rule.speaker!r}")
            if isinstance(rule.target, AgentTarget) and rule.target.name not in self.speakers:
                raise PatternError(f"{self.name}: rule to unknown speaker {rule.target.name!r}")
            if rule.speaker in self.rules:
                raise PatternError(f"{self.name}: two rules from {rule.speaker!r}")
            self.rules[rule.speaker] = rule.target
        self.start = start or items[0][0]
        if self.start not in self.speakers:
            raise PatternError(f"{self.name}: no speaker {self.start!r} to start with")
        if max_turns < 1:
            raise PatternError("max_turns must be at least 1")
        self.max_turns = max_turns
        self.descriptions = dict(descriptions or {})

    async def _speak(
        self, speaker: str, ask: str, context: AgentContext, run: RunContext
    ) -> tuple[Result, RouteTo | None]:
        item = self.speakers[speaker]
        child = run.child()
        run.bus.publish(
            EventType.MEMBER_START,
            pattern=self.name,
            member=speaker,
            depth=child.depth,
            input=ask[:500],
        )
        route: RouteTo | None = None
        if isinstance(item, ToolUsingAgent):
            delegates = [
                _DelegateTool(other, self.descriptions.get(other, ""))
                for other in self.speakers
                if other != speaker
            ]
            agent = with_transfers(
                item, delegates, lambda results: first_route(results) is not None
            )
            outcome, _ = await run_recorded(agent, ask, context, child)
            route = first_route(outcome.tool_results)  # the first one, in call order
            result = Result(
                outcome.content,
                Provenance.own(speaker),
                outcome.usage,
                str(outcome.metadata.get("error") or ""),
                tool_results=list(outcome.tool_results),
            )
        else:
            member: Member = as_member(item, speaker) if not isinstance(item, Member) else item
            result = await member.arun(ask, context, run=child)
            route = first_route(result.tool_results)
        run.bus.publish(
            EventType.MEMBER_END,
            pattern=self.name,
            member=speaker,
            depth=child.depth,
            success=result.success,
            content=result.content[:500],
            error=result.error,
        )
        return result, route

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        transcript: list[Message] = list(context.conversation) if context else []
        spoken: list[Result] = []
        speaker = self.start
        for turn in range(1, self.max_turns + 1):
            self.emit(run, EventType.STEP, step=turn, status="start", detail=speaker)
            shared = AgentContext(
                list(transcript), metadata=dict(context.metadata) if context else {}
            )
            ask = input if turn == 1 else f"Task: {input}\n\nYou are {speaker}: continue the work."
            result, route = await self._speak(speaker, ask, shared, run)
            spoken.append(result)
            if not result.success:
                raise PatternError(f"{self.name}: {speaker} failed: {result.error}")
            if result.content:
                transcript.append(Message.user(f"[{speaker}] {result.content}"))
            if route is not None:
                if route.target not in self.speakers:
                    raise PatternError(
                        f"{self.name}: {speaker} handed off to unknown {route.target!r}"
                    )
                self.emit(
                    run, EventType.HANDOFF, source=speaker, target=route.target, reason=route.reason
                )
                speaker = route.target
                continue
            target = self.rules.get(speaker, TerminateTarget())
            if isinstance(target, TerminateTarget):
                final = result.passed_on(self.name, turns=turn)
                final.members = tuple(spoken)
                final.usage = total_usage(spoken)
                return final
            speaker = target.name
        last = spoken[-1].passed_on(self.name, turns=self.max_turns)
        last.members = tuple(spoken)
        last.usage = total_usage(spoken)
        last.error = f"{self.name} reached its limit of {self.max_turns} turns"
        return last


def _name(item: MemberLike) -> str:
    if isinstance(item, Member):
        return item.name
    return item.agent_id
