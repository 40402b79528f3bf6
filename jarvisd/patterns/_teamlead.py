"""TeamLead: a lead model runs a team in one of three ways.

``sequential``: members work in order, each on the task and everything before it; the
last one's output is the answer. ``parallel``: members work at once, then the lead
writes the answer from their outputs. ``dynamic``: the lead assigns one subtask at a
time (JSON ``{"assign": NAME, "task": "..."}``) and sees each result, until it answers
(``{"done": "..."}``); after ``max_assignments`` it must answer. A reply the lead writes
that is neither is taken as its answer (a small model that forgets the format still
ends the run with what it said).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from .._errors import PatternError
from .._events import EventType
from .._messages import Message, SamplingOptions
from .._runcontext import RunContext
from ..agents import AgentContext, strip_think_tags
from ..engines import Engine, RunEngine
from ._base import (
    Member,
    MemberLike,
    Pattern,
    Provenance,
    Result,
    gather_all,
    sections,
    total_usage,
    unique_members,
)
from ._contracts import ContractError, _json_value

__all__ = ["TeamLead"]

Strategy = Literal["sequential", "parallel", "dynamic"]

DYNAMIC_PROMPT = """You lead this team:
{members}
Assign one subtask at a time. Reply with JSON only, either
{{"assign": "NAME", "task": "what to do"}} or, when you can answer the task,
{{"done": "the final answer"}}."""


class TeamLead(Pattern):
    kind = "team_lead"

    def __init__(
        self,
        engine: Engine,
        members: Sequence[MemberLike],
        *,
        strategy: Strategy = "sequential",
        model: str = "",
        max_assignments: int = 6,
        max_tokens: int = 512,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        if strategy not in ("sequential", "parallel", "dynamic"):
            raise PatternError(f"unknown team strategy {strategy!r}")
        self.engine = engine
        self.model = model
        self.members = {m.name: m for m in unique_members(members, "a team")}
        self.strategy = strategy
        self.max_assignments = max_assignments
        self.max_tokens = max_tokens

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        if self.strategy == "sequential":
            return await self._sequential(input, context, run)
        if self.strategy == "parallel":
            return await self._parallel(input, context, run)
        return await self._dynamic(input, context, run)

    async def _lead(self, messages: list[Message], run: RunContext) -> tuple[str, Result]:
        generation = await RunEngine.bind(self.engine, run).generate(
            messages,
            model=self.model,
            options=SamplingOptions(temperature=0.0, max_tokens=self.max_tokens),
        )
        text = strip_think_tags(generation.content)
        return text, Result(text, Provenance.own(self.name), generation.usage)

    async def _sequential(
        self, input: str, context: AgentContext | None, run: RunContext
    ) -> Result:
        results: list[Result] = []
        for number, member in enumerate(self.members.values(), 1):
            self.emit(run, EventType.STEP, step=number, status="start", detail=member.name)
            ask = input if not results else f"Task: {input}\n\nWork so far:\n{sections(results)}"
            result = await self.call(member, ask, context, run)
            results.append(result)
            if not result.success:
                raise PatternError(f"{self.name}: {member.name} failed: {result.error}")
        final = results[-1].passed_on(self.name)
        final.members = tuple(results)
        final.usage = total_usage(results)
        return final

    async def _parallel(self, input: str, context: AgentContext | None, run: RunContext) -> Result:
        results = await gather_all(
            [self.call(m, input, context, run) for m in self.members.values()]
        )
        text, lead = await self._lead(
            [
                Message.user(
                    f"Task: {input}\n\nYour team's work:\n{sections(results)}\n\n"
                    "Write the final answer from it."
                )
            ],
            run,
        )
        lead.members = (*results, Result(text, lead.provenance, lead.usage))
        lead.usage = total_usage(lead.members)
        return lead

    async def _dynamic(self, input: str, context: AgentContext | None, run: RunContext) -> Result:
        roster = "\n".join(f"- {name}" for name in self.members)
        messages = [Message.system(DYNAMIC_PROMPT.format(members=roster)), Message.user(input)]
        results: list[Result] = []
        assignments = 0
        while True:
            text, lead = await self._lead(messages, run)
            results.append(lead)
            messages.append(Message.assistant(text))
            answer, member, task = _decision(text, self.members)
            if member is None or assignments >= self.max_assignments:
                if member is not None:  # past the cap: one last turn to answer
                    messages.append(
                        Message.user(
                            f"No more assignments ({self.max_assignments} made). Reply with "
                            '{"done": "the final answer"} now.'
                        )
                    )
                    text, lead = await self._lead(messages, run)
                    results.append(lead)
                    answer = _decision(text, {})[0]
                final = Result(answer, Provenance.own(self.name), total_usage(results))
                final.members = tuple(results)
                final.metadata["assignments"] = assignments
                return final
            assignments += 1
            self.emit(run, EventType.STEP, step=assignments, status="start", detail=member.name)
            result = await self.call(member, task or input, context, run)
            results.append(result)
            outcome = result.content if result.success else f"FAILED: {result.error}"
            messages.append(Message.user(f"Result from {member.name}:\n{outcome}"))


def _decision(text: str, members: Mapping[str, Member]) -> tuple[str, Member | None, str]:
    """(answer, member to assign, its task) from a lead's reply: an assignment names a
    member; anything else is the answer (``done``'s value, or the whole text)."""
    try:
        decision = _json_value(text)
    except ContractError:
        return text, None, ""
    if not isinstance(decision, dict):
        return text, None, ""
    member = members.get(str(decision.get("assign", "")))
    if member is not None and "done" not in decision:
        return "", member, str(decision.get("task") or "")
    return str(decision.get("done", text)), None, ""
