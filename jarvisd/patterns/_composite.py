"""Composite step queues (fnord's ``AI.Agent.Composite``): an agent's work as a queue of
steps over one conversation.

A :class:`Completion` is a turn of this conversation: its prompt enters as a system
message, dropped from the history afterwards unless ``keep_prompt``; the reply is kept,
and checked against ``response_format`` (a type, see ``returns``) when one is given. A
:class:`Delegate` runs a member on a prompt built from the state; its answer enters as a
user message headed ``## label`` (a failure as ``**FAILED**``). A list in the queue is a
group that runs at once (bounded by ``group_timeout``), its results entering in list
order.

:class:`Steps` callbacks steer it: ``init`` gives the first queue, ``on_step_start`` and
``on_step_complete`` observe (and may update ``state.internal``), ``get_next_steps``
returns steps to run next (retry, generated tasks, validation loops), ``on_error``
answers ``"retry"``, ``"skip"`` or ``"halt"``. Unlike fnord, a retry of a group re-runs
only its failed steps, every failure of a group is reported, retries are capped per
step (``max_retries``), and the whole queue is capped at ``max_steps``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import PatternError
from .._events import EventType
from .._messages import Message, SamplingOptions, Usage
from .._runcontext import RunContext
from ..agents import AgentContext, strip_think_tags
from ..engines import Engine, RunEngine
from ._base import Member, MemberLike, Pattern, Provenance, Result, as_member
from ._contracts import ContractError, describe, parse_as

__all__ = ["Completion", "Composite", "Delegate", "StepState", "Steps"]


@dataclass(frozen=True, slots=True)
class Completion:
    name: str
    prompt: str
    response_format: Any = None
    keep_prompt: bool = False


@dataclass(frozen=True, slots=True)
class Delegate:
    name: str
    member: Member
    ask: Callable[[StepState], str]
    label: str = ""

    @classmethod
    def to(
        cls, name: str, member: MemberLike, ask: Callable[[StepState], str], label: str = ""
    ) -> Delegate:
        return cls(name, as_member(member), ask, label)


Step = Completion | Delegate
QueueItem = Step | Sequence[Step]


@dataclass(slots=True)
class StepState:
    request: str
    messages: list[Message] = field(default_factory=list)
    internal: dict[str, Any] = field(default_factory=dict)
    #: The last step's reply (a group's: its last member's), and its checked value.
    response: str = ""
    output: object = None
    error: str = ""
    usage: Usage = field(default_factory=Usage)


class Steps:
    """The callbacks of a composite; override what you need (``init`` at least)."""

    def init(self, state: StepState) -> list[QueueItem]:
        raise NotImplementedError("a composite's Steps must say its first steps (init)")

    def on_step_start(self, step: Step, state: StepState) -> None:
        """Called just before ``step`` runs."""

    def on_step_complete(self, step: Step, state: StepState) -> None:
        """Called after ``step`` succeeded; its reply is in ``state.response``."""

    def get_next_steps(self, step: Step, state: StepState) -> list[QueueItem]:
        """Steps to run next, before the rest of the queue."""
        return []

    def on_error(
        self, step: Step, error: str, state: StepState
    ) -> Literal["retry", "skip", "halt"]:
        return "halt"


class Composite(Pattern):
    kind = "composite"

    def __init__(
        self,
        engine: Engine,
        steps: Steps,
        *,
        model: str = "",
        system_prompt: str | None = None,
        max_tokens: int = 1024,
        temperature: float = 0.0,
        group_timeout: float | None = None,
        max_retries: int = 2,
        max_steps: int = 100,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.engine = engine
        self.steps = steps
        self.model = model
        self.system_prompt = system_prompt
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.group_timeout = group_timeout
        self.max_retries = max_retries
        self.max_steps = max_steps

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        state = StepState(input, list(context.conversation) if context else [])
        if self.system_prompt and not state.messages:
            state.messages.append(Message.system(self.system_prompt))
        state.messages.append(Message.user(input))
        queue: deque[QueueItem] = deque(self.steps.init(state))
        retries: dict[str, int] = {}
        ran = 0
        producer = self.name
        while queue:
            item = queue.popleft()
            group = [item] if isinstance(item, Completion | Delegate) else list(item)
            ran += len(group)
            if ran > self.max_steps:
                raise PatternError(f"{self.name}: more than {self.max_steps} steps")
            for step in group:
                self.steps.on_step_start(step, state)
                self.emit(run, EventType.STEP, step=step.name, status="start", detail=_kind(step))
            outcomes = await self._run_group(group, state, run)
            failed = [(s, e) for s, (_, e) in zip(group, outcomes, strict=True) if e]
            for step, (text, error) in zip(group, outcomes, strict=True):
                if isinstance(step, Delegate):
                    label = step.label or step.name
                    body = f"**FAILED**: {error}" if error else text
                    state.messages.append(Message.user(f"## {label}\n{body}"))
                if not error:
                    producer = step.member.name if isinstance(step, Delegate) else self.name
                    state.response = text
                    self.emit(run, EventType.STEP, step=step.name, status="done", detail="")
            if failed:
                retry = await self._failed(failed, state, retries, run)
                if retry:
                    queue.appendleft(retry if len(retry) > 1 else retry[0])
                    continue
            for step in group:
                if not any(step is s for s, _ in failed):
                    self.steps.on_step_complete(step, state)
                for next_item in reversed(self.steps.get_next_steps(step, state)):
                    queue.appendleft(next_item)
        own = Provenance.own(self.name)
        provenance = (
            own if producer == self.name else Provenance(producer, True, (self.name, producer))
        )
        return Result(
            state.response,
            provenance,
            state.usage,
            output=state.output,
            metadata={"steps": ran, "internal": dict(state.internal)},
        )

    async def _failed(
        self,
        failed: list[tuple[Step, str]],
        state: StepState,
        retries: dict[str, int],
        run: RunContext,
    ) -> list[Step]:
        """What to re-run (empty: skip) after ``failed``; raises on halt."""
        again: list[Step] = []
        for step, error in failed:
            state.error = error
            decision = self.steps.on_error(step, error, state)
            if decision == "retry":
                retries[step.name] = retries.get(step.name, 0) + 1
                if retries[step.name] > self.max_retries:
                    raise PatternError(
                        f"{self.name}: step {step.name!r} failed {retries[step.name]} times "
                        f"(at most {self.max_retries} retries): {error}"
                    )
                self.emit(run, EventType.STEP, step=step.name, status="retry", detail=error)
                again.append(step)
            elif decision == "skip":
                self.emit(run, EventType.STEP, step=step.name, status="skipped", detail=error)
            else:
                self.emit(run, EventType.STEP, step=step.name, status="failed", detail=error)
                raise PatternError(f"{self.name}: step {step.name!r} failed: {error}")
        state.error = ""
        return again

    async def _run_group(
        self, group: list[Step], state: StepState, run: RunContext
    ) -> list[tuple[str, str]]:
        """(reply, error) per step, in group order."""
        if len(group) == 1:
            return [await self._run_step(group[0], state, run)]
        tasks = [asyncio.ensure_future(self._run_step(s, state, run)) for s in group]
        done, pending = await asyncio.wait(tasks, timeout=self.group_timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        outcomes: list[tuple[str, str]] = []
        for task in tasks:
            if task in done:
                outcomes.append(task.result())  # a stop signal raised here ends the run
            else:
                outcomes.append(("", f"did not finish within {self.group_timeout:g} s"))
        return outcomes

    async def _run_step(self, step: Step, state: StepState, run: RunContext) -> tuple[str, str]:
        if isinstance(step, Delegate):
            result = await self.call(step.member, step.ask(state), None, run)
            state.usage = state.usage + result.usage
            return result.content, result.error
        messages = [*state.messages, Message.system(step.prompt)]
        if step.response_format is not None:
            messages.append(
                Message.system(
                    f"Reply with JSON only, of this shape: {describe(step.response_format)}"
                )
            )
        generation = await RunEngine.bind(self.engine, run).generate(
            messages,
            model=self.model,
            options=SamplingOptions(temperature=self.temperature, max_tokens=self.max_tokens),
        )
        state.usage = state.usage + generation.usage
        text = strip_think_tags(generation.content)
        if step.keep_prompt:
            state.messages.append(Message.system(step.prompt))
        state.messages.append(Message.assistant(text))
        if step.response_format is not None:
            try:
                state.output = parse_as(step.response_format, text)
            except ContractError as exc:
                return text, f"reply does not fit {describe(step.response_format)}: {exc}"
        return text, ""


def _kind(step: Step) -> str:
    return "delegate" if isinstance(step, Delegate) else "completion"
