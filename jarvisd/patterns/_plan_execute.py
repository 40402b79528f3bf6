"""PlanAndExecute: a planner writes a typed plan, executors carry it out in order.

The plan is JSON, ``{"steps": [{"agent": NAME, "task": "..."}]}``, checked against
:class:`Plan` (a boundary contract). Each step's executor sees the outputs of the steps
before it (context chaining). A failed step leads to a new plan for what is left, with
the failure stated, at most ``max_replans`` times; then the pattern fails. The answer
is the last step's output, passed on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .._errors import PatternError
from .._events import EventType
from .._messages import Message, SamplingOptions
from .._runcontext import RunContext
from ..agents import AgentContext, strip_think_tags
from ..engines import Engine, RunEngine
from ._base import MemberLike, Pattern, Provenance, Result, total_usage, unique_members
from ._contracts import ContractError, describe, parse_as

__all__ = ["Plan", "PlanAndExecute", "PlanItem"]

MAX_PLAN_STEPS = 20


@dataclass
class PlanItem:
    agent: str
    task: str


@dataclass
class Plan:
    steps: list[PlanItem] = field(default_factory=list)


PLANNER_PROMPT = """Break the task into steps and give each to one of these agents:
{agents}
Reply with JSON only, of this shape: {shape}"""


class PlanAndExecute(Pattern):
    kind = "plan_and_execute"

    def __init__(
        self,
        engine: Engine,
        executors: Sequence[MemberLike],
        *,
        model: str = "",
        max_replans: int = 1,
        max_tokens: int = 512,
        descriptions: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.engine = engine
        self.model = model
        self.executors = {m.name: m for m in unique_members(executors, "plan-and-execute")}
        self.max_replans = max_replans
        self.max_tokens = max_tokens
        self.descriptions = descriptions or {}

    def _agents_text(self) -> str:
        return "\n".join(
            f"- {name}" + (f": {self.descriptions[name]}" if name in self.descriptions else "")
            for name in self.executors
        )

    async def plan(self, ask: str, run: RunContext) -> tuple[Plan, Result]:
        """A checked plan for ``ask``; one corrective turn for an unusable reply."""
        engine = RunEngine.bind(self.engine, run)
        messages = [
            Message.system(PLANNER_PROMPT.format(agents=self._agents_text(), shape=describe(Plan))),
            Message.user(ask),
        ]
        options = SamplingOptions(temperature=0.0, max_tokens=self.max_tokens)
        error = ""
        for _ in range(2):
            generation = await engine.generate(messages, model=self.model, options=options)
            text = strip_think_tags(generation.content)
            record = Result(text, Provenance.own(f"{self.name}.planner"), generation.usage)
            try:
                plan: Plan = parse_as(Plan, text)
                self._check(plan)
            except (ContractError, PatternError) as exc:
                error = str(exc)
                messages += [
                    Message.assistant(generation.content),
                    Message.user(f"That plan cannot be used: {exc}. Reply with the JSON only."),
                ]
                continue
            return plan, record
        raise PatternError(f"{self.name}: the planner gave no usable plan ({error})")

    def _check(self, plan: Plan) -> None:
        if not plan.steps:
            raise PatternError("the plan has no steps")
        if len(plan.steps) > MAX_PLAN_STEPS:
            raise PatternError(f"the plan has more than {MAX_PLAN_STEPS} steps")
        for item in plan.steps:
            if item.agent not in self.executors:
                known = ", ".join(self.executors)
                raise PatternError(f"unknown agent {item.agent!r} (agents: {known})")

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        plan, record = await self.plan(input, run)
        return await self.execute(input, plan, record, context, run)

    async def execute(
        self, input: str, plan: Plan, record: Result, context: AgentContext | None, run: RunContext
    ) -> Result:
        """Carry out ``plan`` (``record``: the planner's result that produced it)."""
        self._check(plan)
        results: list[Result] = [record]
        done: list[tuple[PlanItem, Result]] = []
        replans = 0
        queue = list(plan.steps)
        while queue:
            item = queue.pop(0)
            number = len(done) + 1
            self.emit(run, EventType.STEP, step=number, status="start", detail=item.agent)
            ask = _chained(input, done, item.task)
            result = await self.call(self.executors[item.agent], ask, context, run)
            results.append(result)
            if result.success:
                done.append((item, result))
                self.emit(run, EventType.STEP, step=number, status="done", detail=item.agent)
                continue
            self.emit(run, EventType.STEP, step=number, status="failed", detail=result.error)
            if replans >= self.max_replans:
                raise PatternError(
                    f"{self.name}: step {number} ({item.agent}) failed after {replans} "
                    f"replans: {result.error}"
                )
            replans += 1
            self.emit(run, EventType.STEP, step=number, status="retry", detail="replanning")
            plan, record = await self.plan(
                f"{_chained(input, done, '')}\nThe step '{item.task}' given to {item.agent} "
                f"failed: {result.error}\nPlan only the remaining work.",
                run,
            )
            results.append(record)
            queue = list(plan.steps)
        last = done[-1][1]
        outputs = [{"agent": i.agent, "task": i.task, "output": r.content} for i, r in done]
        final = last.passed_on(self.name, replans=replans, steps=len(done), outputs=outputs)
        final.members = tuple(results)
        final.usage = total_usage(results)
        return final


def _chained(task: str, done: Sequence[tuple[PlanItem, Result]], step: str) -> str:
    parts = [f"Overall task: {task}"]
    if done:
        parts.append("Results so far:")
        parts += [f"- {item.task} ({item.agent}): {r.content}" for item, r in done]
    if step:
        parts.append(f"Your step: {step}")
    return "\n".join(parts)
