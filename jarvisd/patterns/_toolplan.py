"""Tool planning: the model writes a plan of tool calls as a DAG, jarvis runs it.

A plan is JSON::

    {"steps": [
      {"id": "a", "tool": "calculator", "arguments": {"expression": "2*21"}},
      {"id": "b", "tool": "calculator", "arguments": {"expression": "$ref:a + 1"}}
    ]}

``$ref:ID`` anywhere in a string argument stands for step ID's result (its text).
Steps run in waves: a wave is every step whose references all ran, and its calls run
concurrently, so a plan of independent steps takes as long as its slowest step. A plan
that names an unknown tool or step, or has a cycle, is refused before anything runs.
A step that references a failed (or skipped) step is skipped, never run on an error
message. Then one more model turn answers the task from the results.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import PatternError
from .._events import EventType
from .._messages import Message, SamplingOptions, ToolCall, ToolResult
from .._runcontext import RunContext
from ..agents import AgentContext, strip_think_tags
from ..engines import Engine, RunEngine
from ..tools import BaseTool, ToolDispatcher
from ._base import Pattern, Provenance, Result
from ._contracts import ContractError, _json_value

__all__ = ["PlanStep", "ToolPlan", "ToolPlanner", "execute_plan"]

_REF = re.compile(r"\$ref:([A-Za-z0-9_.-]+)")
MAX_STEPS = 50
#: Arguments after ``$ref`` substitution (JSON characters): a plan can repeat a large
#: result many times in one argument; past this the step fails instead of growing.
MAX_ARGUMENT_CHARS = 100_000


@dataclass(frozen=True, slots=True)
class PlanStep:
    id: str
    tool: str
    arguments: Mapping[str, Any]

    def refs(self) -> set[str]:
        found: set[str] = set()
        _walk(self.arguments, lambda text: found.update(_REF.findall(text)))
        return found


def _walk(value: object, visit: Callable[[str], object]) -> None:
    if isinstance(value, str):
        visit(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            _walk(item, visit)
    elif isinstance(value, list | tuple):
        for item in value:
            _walk(item, visit)


def _substitute(value: Any, outputs: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        whole = _REF.fullmatch(value)
        if whole is not None:
            return outputs[whole.group(1)]
        return _REF.sub(lambda m: outputs[m.group(1)], value)
    if isinstance(value, Mapping):
        return {k: _substitute(v, outputs) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_substitute(v, outputs) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class ToolPlan:
    steps: tuple[PlanStep, ...]

    @classmethod
    def from_json(cls, data: Any, tools: Sequence[str] | None = None) -> ToolPlan:
        """A checked plan; :class:`PatternError` says what is wrong with it."""
        raw = data.get("steps") if isinstance(data, Mapping) else data
        if not isinstance(raw, list) or not raw:
            raise PatternError('a plan is {"steps": [...]} with at least one step')
        if len(raw) > MAX_STEPS:
            raise PatternError(f"a plan has at most {MAX_STEPS} steps, not {len(raw)}")
        steps = []
        for i, item in enumerate(raw, 1):
            if not isinstance(item, Mapping):
                raise PatternError(f"plan step {i} is not an object")
            step_id, tool = item.get("id", str(i)), item.get("tool")
            arguments = item.get("arguments", {})
            if not isinstance(step_id, str | int) or not isinstance(tool, str):
                raise PatternError(f"plan step {i} needs a string 'id' and 'tool'")
            if not isinstance(arguments, Mapping):
                raise PatternError(f"plan step {step_id!r}: 'arguments' must be an object")
            steps.append(PlanStep(str(step_id), tool, dict(arguments)))
        plan = cls(tuple(steps))
        plan.check(tools)
        return plan

    def check(self, tools: Sequence[str] | None = None) -> None:
        ids = [s.id for s in self.steps]
        if len(set(ids)) != len(ids):
            raise PatternError(
                f"plan step id {next(i for i in ids if ids.count(i) > 1)!r} is used twice"
            )
        for step in self.steps:
            if tools is not None and step.tool not in tools:
                raise PatternError(f"plan step {step.id!r} uses unknown tool {step.tool!r}")
            unknown = step.refs() - set(ids)
            if unknown:
                raise PatternError(f"plan step {step.id!r} refers to unknown step {min(unknown)!r}")
        self.waves()  # refuses cycles

    def waves(self) -> list[list[PlanStep]]:
        """Steps in topological waves; a cycle is refused, naming a step on it."""
        left = {s.id: s.refs() for s in self.steps}
        by_id = {s.id: s for s in self.steps}
        done: set[str] = set()
        waves: list[list[PlanStep]] = []
        while left:
            ready = [i for i, refs in left.items() if refs <= done]
            if not ready:
                raise PatternError(f"plan has a cycle through step {min(left)!r}")
            waves.append([by_id[i] for i in ready])
            for i in ready:
                del left[i]
            done.update(ready)
        return waves


async def execute_plan(
    plan: ToolPlan,
    executor: ToolDispatcher,
    run: RunContext,
    *,
    pattern: str = "tool_plan",
) -> dict[str, ToolResult]:
    """Run ``plan`` wave by wave; every step gets a result (skipped ones a failed one
    that says why), keyed by step id, in plan order."""
    results: dict[str, ToolResult] = {}
    for wave in plan.waves():
        calls: list[tuple[PlanStep, ToolCall]] = []
        for step in wave:
            failed = sorted(r for r in step.refs() if not results[r].success)
            if failed:
                results[step.id] = ToolResult(
                    step.tool,
                    f"Skipped: step {failed[0]!r} it depends on failed.",
                    False,
                    metadata={"skipped": True, "step": step.id},
                )
                run.bus.publish(
                    EventType.STEP,
                    pattern=pattern,
                    depth=run.depth,
                    step=step.id,
                    status="skipped",
                    detail=f"depends on failed step {failed[0]!r}",
                )
                continue
            outputs = {r: results[r].content for r in step.refs()}
            arguments = _substitute(step.arguments, outputs)
            size = len(json.dumps(arguments, ensure_ascii=False))
            if size > MAX_ARGUMENT_CHARS:
                results[step.id] = ToolResult(
                    step.tool,
                    f"Error: arguments of {size} characters after $ref "
                    f"substitution (at most {MAX_ARGUMENT_CHARS}).",
                    False,
                    metadata={"step": step.id},
                )
                run.bus.publish(
                    EventType.STEP,
                    pattern=pattern,
                    depth=run.depth,
                    step=step.id,
                    status="failed",
                    detail="arguments too large",
                )
                continue
            calls.append((step, ToolCall.from_arguments(step.tool, arguments, f"plan_{step.id}")))
            run.bus.publish(
                EventType.STEP,
                pattern=pattern,
                depth=run.depth,
                step=step.id,
                status="start",
                detail=step.tool,
            )
        done = await executor.execute_all([c for _, c in calls], run)
        for (step, _), result in zip(calls, done, strict=True):
            results[step.id] = result
            run.bus.publish(
                EventType.STEP,
                pattern=pattern,
                depth=run.depth,
                step=step.id,
                status="done" if result.success else "failed",
                detail=result.content[:200],
            )
    return {s.id: results[s.id] for s in plan.steps}


PLAN_PROMPT = """Plan the tool calls that answer the task, as JSON only:
{{"steps": [{{"id": "a", "tool": "TOOL", "arguments": {{...}}}}, ...]}}
Write "$ref:ID" inside an argument to use the result of step ID. Steps that do not
refer to each other run at the same time.
Tools:
{tools}"""


class ToolPlanner(Pattern):
    """Plan (one model turn), run the plan, answer from its results (one more turn).
    A refused plan is asked for once more, with the reason."""

    kind = "tool_plan"

    def __init__(
        self,
        engine: Engine,
        tools: Sequence[BaseTool],
        *,
        model: str = "",
        max_tokens: int = 512,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.engine = engine
        self.model = model
        self.max_tokens = max_tokens
        self.executor = ToolDispatcher(tools)

    def _tools_text(self) -> str:
        return "\n".join(
            f"- {s.name}: {s.description} arguments: {dict(s.parameters).get('properties', {})}"
            for s in self.executor.specs
        )

    async def plan(self, input: str, run: RunContext) -> tuple[ToolPlan, Any]:
        engine = RunEngine.bind(self.engine, run)
        options = SamplingOptions(temperature=0.0, max_tokens=self.max_tokens)
        messages = [
            Message.system(PLAN_PROMPT.format(tools=self._tools_text())),
            Message.user(input),
        ]
        usage = None
        for attempt in range(2):
            generation = await engine.generate(messages, model=self.model, options=options)
            usage = generation.usage if usage is None else usage + generation.usage
            try:
                plan = ToolPlan.from_json(
                    _json_value(strip_think_tags(generation.content)), self.executor.names
                )
            except (ContractError, PatternError) as exc:
                if attempt:
                    raise PatternError(f"{self.name}: no usable plan: {exc}") from None
                messages += [
                    Message.assistant(generation.content),
                    Message.user(f"That plan cannot be used: {exc}. Write the JSON plan again."),
                ]
                continue
            return plan, usage
        raise AssertionError("unreachable")  # the loop returns or raises

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        plan, usage = await self.plan(input, run)
        results = await execute_plan(plan, self.executor, run, pattern=self.name)
        lines = "\n".join(f"- {i} ({r.tool_name}): {r.content}" for i, r in results.items())
        engine = RunEngine.bind(self.engine, run)
        answer = await engine.generate(
            [
                Message.user(
                    f"Task: {input}\n\nResults of the planned tool calls:\n{lines}\n\n"
                    "Answer the task from these results."
                ),
            ],
            model=self.model,
            options=SamplingOptions(temperature=0.0, max_tokens=self.max_tokens),
        )
        return Result(
            strip_think_tags(answer.content),
            Provenance.own(self.name),
            usage + answer.usage,
            tool_results=list(results.values()),
            metadata={"plan": [{"id": s.id, "tool": s.tool} for s in plan.steps]},
        )
