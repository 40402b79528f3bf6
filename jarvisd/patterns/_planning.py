"""Planning as configuration: any member plans, executes and synthesizes when its input
is complex enough (selectools' ``AgentConfig(planning=PlanningConfig(...))``).

:class:`Planned` wraps a member. A cheap local heuristic, :func:`complexity`, scores the
input; below ``min_complexity`` (and without ``always``) the member simply answers it.
Otherwise a planner writes a :class:`Plan` whose steps the member carries out in order
(:class:`PlanAndExecute` with the member as its only executor), and one synthesis call
writes the answer from the steps' outputs. The plan can be put to a synchronous approval
handler first: True runs it, False falls back to a plain run, a :class:`Plan` replaces it.
Budget and cancel token are the run's, so the whole planned flow spends one ledger.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass

from .._errors import PatternError
from .._events import EventType
from .._messages import Message, SamplingOptions
from .._runcontext import RunContext
from ..agents import AgentContext, strip_think_tags
from ..engines import Engine, RunEngine
from ._base import AgentMember, MemberLike, Pattern, Provenance, Result, as_member, total_usage
from ._plan_execute import Plan, PlanAndExecute

__all__ = ["Planned", "PlanningConfig", "complexity"]

log = logging.getLogger(__name__)

#: A synchronous plan approval handler: True runs the plan, False declines it (the
#: member answers without one), a Plan runs in its place.
Approval = Callable[[Plan], "bool | Plan"]


@dataclass(frozen=True, slots=True)
class PlanningConfig:
    """When and how a :class:`Planned` member plans. ``enabled=False`` (the default,
    as in selectools) makes the wrapper a plain pass-through."""

    enabled: bool = False
    engine: Engine | None = None  # planner and synthesis engine; the member's by default
    model: str = ""
    auto_approve: bool = True
    approve: Approval | None = None  # required when auto_approve is False
    always: bool = False  # plan every input, bypassing the complexity gate
    min_complexity: int = 2
    max_replans: int = 0

    def __post_init__(self) -> None:
        if not self.auto_approve and self.approve is None:
            raise PatternError("planning: auto_approve=False needs an approve handler")
        # An async handler's coroutine is neither True nor a plan: refused here rather
        # than read as a silent rejection when the first plan is ready.
        if self.approve is not None and inspect.iscoroutinefunction(self.approve):
            raise PatternError("planning: the approve handler must be synchronous")
        if self.min_complexity < 0:
            raise PatternError("planning: min_complexity must be 0 or more")


_CONNECTIVES = re.compile(
    r"\b(then|finally|afterwards|after that|next|first|second|lastly|subsequently)\b",
    re.IGNORECASE,
)
_LIST_ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*\u2022])\s+\S", re.MULTILINE)
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")
#: About four characters a token: the length signal needs no tokenizer.
_LONG_CHARS = 120 * 4


def complexity(text: str) -> int:
    """A 0..4 score of how many steps ``text`` seems to ask for, one point each for:
    sequence connectives ("then", "finally"), a list of two or more items, three or more
    sentences, and more than about 120 tokens. Punctuation alone is no signal:
    semicolons are far more often pasted code than clause separators."""
    score = 0
    if _CONNECTIVES.search(text):
        score += 1
    if len(_LIST_ITEM.findall(text)) >= 2:
        score += 1
    if len(_SENTENCE_END.findall(text.strip() + " ")) >= 3:
        score += 1
    if len(text) > _LONG_CHARS:
        score += 1
    return score


SYNTHESIS_PROMPT = (
    "You are given a task and the results of the steps taken to carry it out. "
    "Write the final answer to the task from those results."
)


class Planned(Pattern):
    """``member`` with planning as configuration (see the module docstring)."""

    kind = "planned"

    def __init__(
        self,
        member: MemberLike,
        planning: PlanningConfig,
        *,
        engine: Engine | None = None,
        max_tokens: int = 512,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.member = as_member(member)
        self.planning = planning
        engine = planning.engine or engine
        if engine is None and isinstance(self.member, AgentMember):
            engine = self.member.agent.engine
        if engine is None and planning.enabled:
            raise PatternError(f"{self.name}: planning needs an engine for its planner")
        self.engine = engine
        self.max_tokens = max_tokens

    def should_plan(self, input: str) -> tuple[bool, int]:
        """Whether ``input`` passes the gate, and its score."""
        if not self.planning.enabled:
            return False, 0
        score = complexity(input)
        return self.planning.always or score >= self.planning.min_complexity, score

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        plan_it, score = self.should_plan(input)
        if not plan_it:
            if self.planning.enabled:
                self.emit(run, EventType.STEP, step="plan", status="skipped", detail=f"{score}")
            return await self._plain(input, context, run, complexity=score)
        assert self.engine is not None  # checked in __init__ whenever planning is enabled
        pae = PlanAndExecute(
            self.engine,
            [self.member],
            model=self.planning.model,
            max_replans=self.planning.max_replans,
            max_tokens=self.max_tokens,
            descriptions={self.member.name: "carries out each step"},
            name=f"{self.name}.plan",
        )
        plan, record = await pae.plan(input, run)
        approved = self._approve(plan)
        if approved is None:
            self.emit(run, EventType.STEP, step="plan", status="skipped", detail="rejected")
            log.warning("%s: the plan was rejected; answering without one", self.name)
            plain = await self._plain(input, context, run, complexity=score, rejected=True)
            plain.usage = plain.usage + record.usage
            return plain
        plan = approved
        self.emit(run, EventType.STEP, step="plan", status="done", detail=f"{len(plan.steps)}")
        executed = await pae.execute(input, plan, record, context, run)
        synthesis = await self._synthesize(input, executed, run)
        steps = [asdict(s) for s in plan.steps]
        return Result(
            synthesis.content,
            Provenance.own(self.name),
            total_usage([executed, synthesis]),
            members=(executed, synthesis),
            metadata={
                "complexity": score,
                "planned": True,
                "reasoning": "\n".join(f"{i}. {s.task}" for i, s in enumerate(plan.steps, 1)),
                "planning": {"plan": steps, "steps_executed": executed.metadata["steps"]},
            },
        )

    async def _plain(
        self, input: str, context: AgentContext | None, run: RunContext, **metadata: object
    ) -> Result:
        result = await self.call(self.member, input, context, run)
        return result.passed_on(self.name, planned=False, **metadata)

    def _approve(self, plan: Plan) -> Plan | None:
        """The plan to run, or None when the handler declined it."""
        handler = self.planning.approve
        if self.planning.auto_approve or handler is None:
            return plan
        verdict = handler(plan)
        if inspect.isawaitable(verdict):
            close = getattr(verdict, "close", None)
            if close is not None:
                close()  # never awaited: silence "coroutine was never awaited"
            raise PatternError(f"{self.name}: the approve handler must be synchronous")
        if verdict is True:
            return plan
        if verdict is False:
            return None
        if isinstance(verdict, Plan):
            return verdict
        raise PatternError(
            f"{self.name}: the approve handler returned {type(verdict).__name__}; "
            "expected True, False or a Plan"
        )

    async def _synthesize(self, input: str, executed: Result, run: RunContext) -> Result:
        assert self.engine is not None
        engine = RunEngine.bind(self.engine, run)
        lines = [f"Task: {input}", "Step results:"]
        outputs = executed.metadata["outputs"]
        assert isinstance(outputs, list)  # _execute's own record, not outside input
        lines += [f"- {o['task']}: {o['output']}" for o in outputs]
        generation = await engine.generate(
            [Message.system(SYNTHESIS_PROMPT), Message.user("\n".join(lines))],
            model=self.planning.model,
            options=SamplingOptions(temperature=0.0, max_tokens=self.max_tokens),
        )
        content = strip_think_tags(generation.content)
        return Result(content, Provenance.own(f"{self.name}.synthesis"), generation.usage)
