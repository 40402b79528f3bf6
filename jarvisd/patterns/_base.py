"""The one interface of composition: a :class:`Member` takes an input and a context
within a run, and returns a :class:`Result` that says who produced it.

Agents are wrapped (:class:`AgentMember`), never subclassed: any agent (plain,
tool-using, sandboxed, external) and any pattern can be a member of any pattern.

Every member runs in ``run.child()``: the same cancel token, budget ledger and event bus
as the whole tree, one level deeper. Patterns publish typed events on that bus (fields
beyond ``pattern`` and ``depth``, which every one carries):

=================  ==========================================================
``route_chosen``   ``choice`` (1..N, 0: none), ``member``, ``fallback``, ``reply``
``member_start``   ``member``, ``input`` (clipped)
``member_end``     ``member``, ``success``, ``content`` (clipped), ``error``
``round``          ``round`` (1-based), ``of``
``handoff``        ``source``, ``target``, ``reason``
``step``           ``step`` (its id or index), ``status`` (start, done, failed,
                   skipped, retry), ``detail``
=================  ==========================================================
"""

from __future__ import annotations

import abc
import asyncio
import contextvars
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field

from .._errors import JarvisError, PatternError
from .._events import EventType
from .._messages import ToolResult, Usage
from .._runcontext import RunContext
from ..agents import AgentContext, AgentResult, BaseAgent

__all__ = [
    "AgentMember",
    "Member",
    "MemberLike",
    "Pattern",
    "Provenance",
    "Result",
    "as_member",
    "call_member",
    "current_context",
]

#: How much of an input or output goes into an event (events are telemetry, not a log
#: of every byte a model wrote).
EVENT_CLIP = 500

_CONTEXT: contextvars.ContextVar[AgentContext | None] = contextvars.ContextVar(
    "jarvis_pattern_context", default=None
)


def current_context() -> AgentContext | None:
    """The context of the member call this code runs inside (sub-agent tools read the
    caller's history and state from it)."""
    return _CONTEXT.get()


@dataclass(frozen=True, slots=True)
class Provenance:
    """Who produced a result: ``producer`` is the member whose words these are,
    ``delegated`` is true when that is not the member that returned the result, and
    ``path`` runs from the member that returned it down to the producer."""

    producer: str
    delegated: bool = False
    path: tuple[str, ...] = ()

    @classmethod
    def own(cls, name: str) -> Provenance:
        """``name`` produced the result itself."""
        return cls(name, False, (name,))

    def via(self, name: str) -> Provenance:
        """This provenance seen from ``name``, which passed the result on."""
        return Provenance(self.producer, True, (name, *self.path))

    def to_dict(self) -> dict[str, object]:
        return {"producer": self.producer, "delegated": self.delegated, "path": list(self.path)}


@dataclass(slots=True)
class Result:
    """What a member returns. ``error`` is empty on success; ``output`` holds the typed
    value when a contract (``returns``, a handoff's ``output_type``) checked one;
    ``members`` are the results of the members a composite ran, in order."""

    content: str
    provenance: Provenance
    usage: Usage = field(default_factory=Usage)
    error: str = ""
    output: object = None
    members: tuple[Result, ...] = ()
    tool_results: list[ToolResult] = field(default_factory=list)
    metadata: dict[str, object] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return not self.error

    def passed_on(self, name: str, **metadata: object) -> Result:
        """This result returned by ``name`` on behalf of its producer."""
        return Result(
            self.content,
            self.provenance.via(name),
            self.usage,
            self.error,
            self.output,
            (self,),
            list(self.tool_results),
            {**self.metadata, **metadata},
        )

    def to_agent_result(self) -> AgentResult:
        metadata = {**self.metadata, "provenance": self.provenance.to_dict()}
        if self.error:
            metadata["error"] = self.error
        return AgentResult(self.content, list(self.tool_results), 0, metadata, self.usage)

    def to_dict(self) -> dict[str, object]:
        return {
            "content": self.content,
            "provenance": self.provenance.to_dict(),
            "usage": self.usage.to_dict(),
            "error": self.error,
            "members": [m.to_dict() for m in self.members],
        }


class Member(abc.ABC):
    """Anything that can be composed: one required method, :meth:`arun`."""

    name: str = "member"

    @abc.abstractmethod
    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        """Answer ``input`` within ``run`` (a new run when None)."""

    def run(self, input: str, context: AgentContext | None = None) -> Result:
        """Synchronous wrapper over :meth:`arun` for scripts."""
        return asyncio.run(self.arun(input, context))


MemberLike = Member | BaseAgent


class AgentMember(Member):
    """An agent as a member. An agent's own failure (an unusable reply, max turns)
    becomes a failed result; the run's stop signals and jarvis errors pass through to
    :func:`call_member`, which records them."""

    def __init__(self, agent: BaseAgent, name: str | None = None) -> None:
        self.agent = agent
        self.name = name or agent.agent_id

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        outcome = await self.agent.arun(input, context, run=run or RunContext())
        error = ""
        if outcome.metadata.get("error"):
            error = str(outcome.metadata["error"])
        elif outcome.metadata.get("max_turns_exceeded"):
            error = f"{self.name} stopped at its turn limit"
        return Result(
            outcome.content,
            Provenance.own(self.name),
            outcome.usage,
            error,
            tool_results=list(outcome.tool_results),
            metadata={"turns": outcome.turns},
        )


def as_member(item: MemberLike, name: str | None = None) -> Member:
    """A member for ``item``: members as they are, agents wrapped."""
    if isinstance(item, Member):
        if name is not None and name != item.name:
            raise PatternError(f"member {item.name!r} cannot be renamed {name!r} here")
        return item
    if isinstance(item, BaseAgent):
        return AgentMember(item, name)
    raise PatternError(f"{type(item).__name__} is neither an agent nor a pattern")


def unique_members(items: Sequence[MemberLike], what: str) -> list[Member]:
    """Members with distinct names (patterns address members by name)."""
    members = [as_member(i) for i in items]
    if not members:
        raise PatternError(f"{what} needs at least one member")
    seen: set[str] = set()
    for member in members:
        if member.name in seen:
            raise PatternError(f"{what} has two members named {member.name!r}")
        seen.add(member.name)
    return members


class Pattern(Member):
    """Base of the built-in patterns: a name and the event helpers."""

    kind: str = "pattern"

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.kind

    def emit(self, run: RunContext, event: EventType, **data: object) -> None:
        run.bus.publish(event, pattern=self.name, depth=run.depth, **data)

    async def call(
        self, member: Member, input: str, context: AgentContext | None, run: RunContext
    ) -> Result:
        return await call_member(self.name, member, input, context, run)


async def call_member(
    parent: str, member: Member, input: str, context: AgentContext | None, run: RunContext
) -> Result:
    """Run ``member`` as a child of ``parent`` in ``run.child()``, with its start and end
    on the bus. A :class:`JarvisError` it raises becomes a failed result (the parent
    decides what a failure means); the run's stop signals and task cancellation pass
    through, after the end event."""
    child = run.child()
    bus = run.bus
    bus.publish(
        EventType.MEMBER_START,
        pattern=parent,
        member=member.name,
        depth=child.depth,
        input=input[:EVENT_CLIP],
    )
    token = _CONTEXT.set(context)
    try:
        result = await member.arun(input, context, run=child)
    except JarvisError as exc:
        result = Result("", Provenance.own(member.name), error=str(exc))
    except BaseException as exc:
        error = "cancelled" if isinstance(exc, asyncio.CancelledError) else str(exc)
        bus.publish(
            EventType.MEMBER_END,
            pattern=parent,
            member=member.name,
            depth=child.depth,
            success=False,
            content="",
            error=error or type(exc).__name__,
        )
        raise
    finally:
        _CONTEXT.reset(token)
    bus.publish(
        EventType.MEMBER_END,
        pattern=parent,
        member=member.name,
        depth=child.depth,
        success=result.success,
        content=result.content[:EVENT_CLIP],
        error=result.error,
    )
    return result


async def gather_all(coros: Sequence[Coroutine[object, object, Result]]) -> list[Result]:
    """Run member calls at once, results in order. When one raises (a stop signal), the
    others are cancelled and awaited before it propagates: no member keeps running, or
    spending, after its pattern has given up (``asyncio.gather`` alone leaves them)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def total_usage(results: Sequence[Result]) -> Usage:
    usage = Usage()
    for result in results:
        usage = usage + result.usage
    return usage


def sections(results: Sequence[Result]) -> str:
    """Members' answers under ``## name`` headings, a failure as ``**FAILED**``."""
    parts = []
    for r in results:
        body = r.content if r.success else f"**FAILED**: {r.error}"
        name = r.provenance.path[0] if r.provenance.path else r.provenance.producer
        parts.append(f"## {name}\n{body}")
    return "\n\n".join(parts)
