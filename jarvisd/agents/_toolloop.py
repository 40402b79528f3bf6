"""THE tool loop, shared by every tool-using agent (orchestrator, native_react,
native_openhands, rlm). Agents differ only in their :class:`Dialect`: how the model is
prompted, how its reply is read, and how tool results are fed back.

One turn: fit the history to the engine's real context window, generate (through
``BaseAgent._generate``: the run's budget and cancel token apply), parse the reply into
a final answer, tool calls, or an unreadable reply. Calls of one turn run concurrently;
each gets a result, even on cancellation (a synthetic "cancelled" result). An unreadable
reply gets ONE corrective re-prompt; a second one in a row ends the run with
``metadata["error"]``, never silently taken as the answer.

Grounded answers: when a run used tools and its final answer states none of the numbers
they returned ("This will return the result of the expression", a blank where a call was
cut out), the loop asks once, in one turn without tools, for the answer stating them,
and returns what the model then says as it is (see :func:`drops_results`;
``metadata["reasked"]`` is then true). The model's text is never rewritten.

With ``run.on_delta`` set, the answer goes out through an :class:`AnswerGate`
(``_answer``), which lets out only final-answer text, so that what was streamed is the
run's answer. Turns of dialects that can commit to an answer before the reply ends are
then generated as a stream (through the same ``RunEngine``); every other turn is one
plain ``generate`` call.

Stopping at the call: a dialect's ``stop_when`` says where a reply holds its whole
tool calls, and the engine stops generating there (a model that writes its call
fifteen times, or invents the result after it, costs the tokens of one call). Calls
opened together in one block (a JSON array, tagged calls one after another) all run.

Checkpoint state (``run.checkpoint(state)`` after every completed turn; ``run.resume``
continues from it). A JSON object::

    {
      "version": 1,
      "agent": "orchestrator",                # agent_id that wrote it
      "input": "...",                          # the task
      "messages": [Message.to_dict(), ...],    # the whole history so far
      "turns": 3,                              # model turns completed
      "tool_results": [ToolResult.to_dict(), ...],
      "usage": {"prompt_tokens": .., "completion_tokens": .., "total_tokens": ..},
      "reprompts": 0,                          # corrective re-prompts in a row
      "guard": {"max_repeats": 1, "counts": {...}, "last": {...}},
      "final": {"content": "...", "meta": {...}}   # only once the run has its answer
    }

A state is written only after a turn's tool results are in ``messages``, so resuming
never replays a call that already ran. The answer is written once, with ``final``, as
the run ends: a run resumed from it returns that answer at once, with no more turns
(a crash between the answer and the task's end must neither ask the model again with
its own answer as the last message, nor re-run rlm's cells up to a repeated FINAL). Agents with process state (rlm's REPL) rebuild it
in ``Dialect.resume``.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import re
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from .._events import EventBus
from .._grounding import Sources, invented, unrelated
from .._messages import Generation, Message, Role, ToolCall, ToolResult, ToolSpec, Usage
from .._run import RunContext
from .._toolcalls import starts_like_a_call
from ..engines import Engine, RunEngine
from ..tools import BaseTool, LoopGuard, ToolExecutor, cancelled_result
from ._answer import AnswerGate
from ._base import AgentContext, AgentResult, BaseAgent

__all__ = [
    "Dialect",
    "LoopSetup",
    "LoopState",
    "Step",
    "ToolUsingAgent",
    "drops_results",
    "estimate_tokens",
    "fit_messages",
    "run_tool_loop",
]

STATE_VERSION = 1


@dataclass(slots=True)
class Step:
    """What one reply means."""

    kind: Literal["final", "calls", "invalid"]
    content: str = ""  # final: the answer; calls: the text kept in history
    calls: tuple[ToolCall, ...] = ()
    error: str = ""  # invalid: what was wrong, for the corrective prompt
    recovered: bool = False  # calls were read from text, not structured tool_calls


class Dialect(abc.ABC):
    """How one agent talks to its model."""

    #: Pass tool specs to the engine (native function calling).
    offers_tools: ClassVar[bool] = False
    #: Stop sequences for generation (e.g. ReAct stops before inventing observations).
    stop: tuple[str, ...] = ()
    #: Hold back calls the run does not ground (values it never gave, a name passed to a
    #: tool foreign to the request: see ``_grounding``) and ask for the answer instead.
    holds_ungrounded: bool = False

    def system_prompt(self, executor: ToolExecutor) -> str | None:
        return None

    def stop_when(self, executor: ToolExecutor) -> Callable[[str], int | None] | None:
        """Where a reply is complete because it holds its whole tool calls (see
        ``SamplingOptions.stop_when``): generation stops there, and the calls run
        without waiting for what the model would write after them. None: never."""
        return None

    @abc.abstractmethod
    def parse(self, generation: Generation, executor: ToolExecutor) -> Step: ...

    def assistant_message(self, generation: Generation, step: Step) -> Message:
        """The reply as kept in history (text protocols keep plain text)."""
        return Message.assistant(step.content)

    def result_messages(self, step: Step, results: Sequence[ToolResult]) -> list[Message]:
        text = "\n\n".join(
            f"Observation ({r.tool_name}): {r.content}"
            if len(results) > 1
            else f"Observation: {r.content}"
            for r in results
        )
        return [Message.user(text)]

    def corrective(self, step: Step) -> str:
        return f"Your reply could not be used: {step.error}. Answer again in the required format."

    def final_from_results(self, results: Sequence[ToolResult]) -> str | None:
        """A final answer produced by a tool (rlm's FINAL()), or None."""
        return None

    #: For streaming runs (see ``_answer``): given the beginning of a reply, think
    #: blocks left out, the part of its final answer that no continuation can change,
    #: or None while it may still be a call. None here: the answer goes out in one
    #: piece once the reply is read.
    answer_so_far: Callable[[str], str | None] | None = None

    async def resume(self, state: LoopState, run: RunContext) -> None:  # noqa: B027 - optional hook
        """Rebuild process state for a resumed loop (default: nothing to rebuild)."""


@dataclass(slots=True)
class LoopState:
    input: str
    messages: list[Message]
    guard: LoopGuard
    turns: int = 0
    tool_results: list[ToolResult] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    reprompts: int = 0
    recovered_calls: int = 0
    #: The run's answer and its metadata, once it has one (see the module docstring).
    final: dict[str, Any] | None = None

    def to_dict(self, agent: str) -> dict[str, Any]:
        data = {
            "version": STATE_VERSION,
            "agent": agent,
            "input": self.input,
            "messages": [m.to_dict() for m in self.messages],
            "turns": self.turns,
            "tool_results": [r.to_dict() for r in self.tool_results],
            "usage": self.usage.to_dict(),
            "reprompts": self.reprompts,
            "recovered_calls": self.recovered_calls,
            "guard": self.guard.to_dict(),
        }
        if self.final is not None:
            data["final"] = self.final
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoopState:
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported loop state version {data.get('version')!r}")
        return cls(
            input=str(data.get("input", "")),
            messages=[Message.from_dict(m) for m in data["messages"]],
            guard=LoopGuard.from_dict(data.get("guard") or {}),
            turns=int(data.get("turns", 0)),
            tool_results=[ToolResult.from_dict(r) for r in data.get("tool_results") or ()],
            usage=Usage.from_dict(data.get("usage") or {}),
            reprompts=int(data.get("reprompts", 0)),
            recovered_calls=int(data.get("recovered_calls", 0)),
            final=_final_of(data.get("final")),
        )


def _final_of(data: Any) -> dict[str, Any] | None:
    """A saved answer, or None when there is none (or it is not one)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("content"), str):
        return None
    meta = data.get("meta")
    return {"content": data["content"], "meta": dict(meta) if isinstance(meta, Mapping) else {}}


@dataclass(slots=True)
class LoopSetup:
    """Everything one run of the loop needs; ``close`` releases per-run resources."""

    dialect: Dialect
    executor: ToolExecutor
    messages: list[Message]
    close: Callable[[], Awaitable[None]] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


# -- fitting the history into the real context window ------------------------------


def estimate_tokens(message: Message) -> int:
    """A conservative estimate (about 3 characters a token, plus framing): no tokenizer
    is needed, and over-estimating only drops a turn early."""
    size = len(message.content)
    for call in message.tool_calls:
        size += len(call.name) + len(call.arguments) + 16
    return size // 3 + 8


def _trim_middle(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    keep = max(max_chars - 80, 40)
    head, tail = text[: keep // 2], text[-(keep // 2) :]
    return f"{head}\n[... {len(text) - 2 * (keep // 2)} characters cut to fit the context window ...]\n{tail}"


def _shrink(message: Message, tokens: int) -> Message:
    return Message(
        message.role,
        _trim_middle(message.content, max(tokens * 3, 120)),
        message.tool_calls,
        message.tool_call_id,
        message.name,
    )


def fit_messages(messages: Sequence[Message], budget: int) -> list[Message]:
    """The history to send when only ``budget`` tokens of prompt fit.

    Kept: the leading system messages and the task (first user message), then whole
    turns from the newest back; an assistant message is never separated from the
    results of its tool calls. What is dropped is said in one short note. Oversized
    single messages are cut in the middle rather than dropped.
    """
    sizes = [estimate_tokens(m) for m in messages]
    if sum(sizes) <= budget:
        return list(messages)
    head_end = 0
    while head_end < len(messages) and messages[head_end].role is Role.SYSTEM:
        head_end += 1
    if head_end < len(messages) and messages[head_end].role is Role.USER:
        head_end += 1
    head = list(messages[:head_end])
    head_size = sum(sizes[:head_end])
    if head_size > budget // 2:  # the task itself is huge: cut its middle
        share = max(budget // 2 // max(len(head), 1), 32)
        head = [_shrink(m, share) if estimate_tokens(m) > share else m for m in head]
        head_size = sum(estimate_tokens(m) for m in head)
    # Turn groups: an assistant message and everything up to the next assistant message.
    groups: list[tuple[int, int]] = []
    start = head_end
    for i in range(head_end + 1, len(messages) + 1):
        if i == len(messages) or messages[i].role is Role.ASSISTANT:
            groups.append((start, i))
            start = i
    kept: list[Message] = []
    left = budget - head_size - 30
    for g_start, g_end in reversed(groups):
        size = sum(sizes[g_start:g_end])
        if size <= left:
            kept = list(messages[g_start:g_end]) + kept
            left -= size
            continue
        if not kept:  # even the newest turn is too big: keep it, cut down
            share = max(left // max(g_end - g_start, 1), 32)
            kept = [_shrink(m, share) for m in messages[g_start:g_end]]
        break
    dropped = len(messages) - head_end - len(kept)
    note = (
        [Message.user(f"[{dropped} earlier messages were left out to fit the context window.]")]
        if dropped
        else []
    )
    return head + note + kept


# -- the agent base and the loop ---------------------------------------------------


class ToolUsingAgent(BaseAgent):
    """Base of agents that call tools. Subclasses provide :meth:`dialect` (and may
    extend :meth:`_setup` with per-run tools or resources)."""

    accepts_tools: ClassVar[bool] = True

    def __init__(
        self,
        engine: Engine,
        model: str = "",
        *,
        tools: Sequence[BaseTool] = (),
        bus: EventBus | None = None,
        temperature: float = 0.7,
        max_tokens: int = 1024,
        system_prompt: str | None = None,
        max_turns: int = 10,
        max_repeats: int = 1,
        tool_timeout: float = 30.0,
    ) -> None:
        super().__init__(
            engine,
            model,
            bus=bus,
            temperature=temperature,
            max_tokens=max_tokens,
            system_prompt=system_prompt,
        )
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.tools = list(tools)
        self.max_turns = max_turns
        self.max_repeats = max_repeats
        self.tool_timeout = tool_timeout
        # Built here so that a bad tool list (two tools of one name) fails at once, and
        # reused by every run while the tool list stays the same.
        self._default_executor: ToolExecutor | None = None
        self._default_executor = self._executor()

    @abc.abstractmethod
    def dialect(self) -> Dialect: ...

    def _executor(self, extra: Sequence[BaseTool] = ()) -> ToolExecutor:
        cached = self._default_executor
        if (
            not extra
            and cached is not None
            and list(cached.tools.values()) == self.tools
            and cached.timeout == self.tool_timeout
        ):
            return cached
        return ToolExecutor([*self.tools, *extra], bus=self.bus, timeout=self.tool_timeout)

    def _system(self, dialect_prompt: str | None) -> str | None:
        parts = [p for p in (dialect_prompt, self.system_prompt) if p]
        return "\n\n".join(parts) or None

    async def _setup(self, input: str, context: AgentContext | None, run: RunContext) -> LoopSetup:
        dialect = self.dialect()
        executor = self._executor()
        messages = self._build_messages(
            _with_memory(input, context),
            context,
            system_prompt=self._system(dialect.system_prompt(executor)),
        )
        return LoopSetup(dialect, executor, messages)

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> AgentResult:
        run = self._run_context(run)
        setup = await self._setup(input, context, run)
        try:
            return await run_tool_loop(self, setup, input, run)
        finally:
            if setup.close is not None:
                await setup.close()


def _with_memory(input: str, context: AgentContext | None) -> str:
    if context is None or not context.memory_results:
        return input
    notes = "\n".join(f"- {getattr(m, 'text', m)}" for m in context.memory_results)
    return f"{input}\n\nRelevant notes:\n{notes}"


async def run_tool_loop(
    agent: ToolUsingAgent, setup: LoopSetup, input: str, run: RunContext
) -> AgentResult:
    dialect, executor = setup.dialect, setup.executor
    resumed = False
    if run.resume is not None and run.resume.get("agent") == agent.agent_id:
        state = LoopState.from_dict(run.resume)
        resumed = True
        if state.final is None:  # an answered run needs nothing rebuilt (see below)
            await dialect.resume(state, run)
    else:
        state = LoopState(input, list(setup.messages), LoopGuard(agent.max_repeats))
    agent._emit_turn_start(run, input, resumed=resumed)
    specs: Sequence[ToolSpec] = executor.specs if dialect.offers_tools else ()
    window = await agent.engine.context_length(agent.model)
    budget = None
    if window:
        # An estimate like estimate_tokens: repr is as long as JSON here, and cheaper.
        spec_tokens = (
            sum(len(s.name) + len(s.description) + len(repr(s.parameters)) + 60 for s in specs) // 3
        )
        budget = max(window - agent.max_tokens - spec_tokens - 64, 256)
    counted = [0, 0]  # messages already sized, their estimated tokens (history only grows)
    known = {r.content for r in state.tool_results if r.success}  # results the model has
    # What the run was given, for the calls' values (see _grounding): the task and the
    # conversation, the agent's own instructions, then each tool result as it comes.
    sources = Sources([agent.system_prompt or ""])
    indexed = 0
    # What agent._generate would do each turn, done once: every turn is alike.
    engine = RunEngine.bind(agent.engine, run)
    sampling = agent._options(stop=dialect.stop or None, stop_when=dialect.stop_when(executor))
    # Streaming runs pass their answer through the gate; a turn is generated as a
    # stream when some of it may go out while it is generated.
    gate = None if run.on_delta is None else AnswerGate(run.on_delta, dialect.answer_so_far)
    # Tools a held call named: not offered again, and a later call to one is held too.
    withheld: set[str] = set()
    held_so_far: list[dict[str, Any]] = []

    def save() -> None:
        if run.checkpoint is not None:
            run.checkpoint(state.to_dict(agent.agent_id))

    def finish(content: str, **meta: Any) -> AgentResult:
        if held_so_far:  # a run that answered after a held call says it held one
            meta.setdefault("held_calls", list(held_so_far))
        if state.final is None:
            # The answer is saved before anything says the run ended: from here on a
            # resume returns it (no more turns), whatever happens before the task ends.
            state.final = {"content": content, "meta": dict(meta)}
            save()
        metadata = {
            "agent": agent.agent_id,
            "tool_calls": len(state.tool_results),
            "recovered_calls": state.recovered_calls,
            "blocked_calls": sum(1 for r in state.tool_results if r.metadata.get("blocked")),
            **setup.metadata,
            **meta,
        }
        if resumed:
            metadata["resumed"] = True
        agent._emit_turn_end(
            run,
            turns=state.turns,
            content=content,
            **{k: v for k, v in meta.items() if k == "error"},
        )
        if gate is not None and "error" not in meta:
            gate.close(content)
        return AgentResult(content, list(state.tool_results), state.turns, metadata, state.usage)

    if state.final is not None:  # resumed after the answer: end with it
        return finish(state.final["content"], **state.final["meta"])
    while state.turns < agent.max_turns:
        run.cancel.raise_if_cancelled()
        for message in state.messages[indexed:]:
            if message.role is not Role.SYSTEM:  # the system one is the dialect's prompt
                sources.add(message.content)
        indexed = len(state.messages)
        messages = list(state.messages)
        offered = [s for s in specs if s.name not in withheld] if withheld else specs
        if budget:
            for message in messages[counted[0] :]:  # size only what was appended since
                counted[1] += estimate_tokens(message)
            counted[0] = len(messages)
            if counted[1] > budget:
                messages = fit_messages(messages, budget)
        if gate is None or not gate.streams:
            generation = await engine.generate(
                messages, model=agent.model, tools=offered, options=sampling
            )
        else:
            generation = await gate.turn(
                engine.stream(messages, model=agent.model, tools=offered, options=sampling)
            )
        state.turns += 1
        state.usage = state.usage + generation.usage
        step = dialect.parse(generation, executor)
        if step.kind == "final":
            # Not saved before finish(): a state whose last message is the answer but
            # not marked final would be resumed into one more turn (asked with its own
            # answer). A crash before then re-asks this turn, which ran no tool.
            state.messages.append(Message.assistant(generation.content))
            content, meta = await _grounded(
                agent, run, state, dialect, executor, gate, step.content
            )
            return finish(content, **meta)
        if step.kind == "invalid":
            state.messages.append(Message.assistant(generation.content))
            if state.reprompts >= 1:
                return finish(
                    f"Error: the model's reply could not be used twice in a row ({step.error}). "
                    f"Last reply: {generation.content[:500]!r}",
                    error=f"unparseable model output: {step.error}",
                )
            state.reprompts += 1
            state.messages.append(Message.user(dialect.corrective(step)))
            save()
            continue
        state.reprompts = 0
        step = _unique_calls(step)
        held = _held(step.calls, executor, sources, withheld) if dialect.holds_ungrounded else []
        if held:
            # Not run: a call on values nobody gave, or on a tool foreign to the request,
            # answers nothing (a "last world cup" looked up for a made-up team, a
            # hexagon's sides as a boiling point). Once, the turn is asked again with the
            # other tools (one may need no made-up value: the current time, not a
            # conversion of an invented one); then one turn without tools answers.
            first_hold = not withheld
            withheld.update(h["tool"] for h in held)
            held_so_far.extend(held)
            others = [s for s in specs if s.name not in withheld]
            if first_hold and others and state.turns < agent.max_turns:
                # The held reply stays out of the history: it holds the made-up values.
                state.messages.append(Message.user(retry_note(held, others)))
                save()
                continue
            insisted = not first_hold and all("withheld" in h for h in held)
            held = held_so_far
            state.messages.append(Message.assistant(generation.content))
            if insisted or state.turns >= agent.max_turns:  # no answer will come of another
                return finish(held_message(held), held_calls=held)
            content, more = await _answer_turn(
                agent, run, state, dialect, executor, held_note(held), gate
            )
            if "error" in more:  # it called again: say what is missing instead
                more.pop("error")
                content = held_message(held)
            return finish(content, held_calls=held, **more)
        if step.recovered:
            state.recovered_calls += len(step.calls)
        state.messages.append(dialect.assistant_message(generation, step))
        try:
            results = await executor.execute_all(step.calls, run, state.guard)
        except BaseException:
            # The history must never hold a call without a result, even when the run
            # stops in the middle of a tool.
            results = [cancelled_result(c) for c in step.calls]
            state.messages.extend(dialect.result_messages(step, results))
            save()
            raise
        no_progress = True
        for r in results:
            if not (r.metadata.get("blocked") or (r.success and r.content in known)):
                no_progress = False
        known.update(r.content for r in results if r.success)
        state.tool_results.extend(results)
        state.messages.extend(dialect.result_messages(step, results))
        final = dialect.final_from_results(results)
        if final is not None and not run.cancel.cancelled:
            return finish(final, final_from_tool=True)  # saved once, as the answer
        save()
        if run.cancel.cancelled:
            raise run.cancel.error()
        if no_progress:
            if state.turns >= agent.max_turns:
                break
            # Nothing new this turn: every call was blocked as a repeat, or returned a
            # result the model already had (small local models feed a result back into
            # the tool). One turn without tools asks for the answer instead.
            why = BLOCKED_NOTE if any(r.metadata.get("blocked") for r in results) else ""
            content, meta = await _answer_turn(agent, run, state, dialect, executor, why, gate)
            if "error" not in meta:
                content, more = await _grounded(agent, run, state, dialect, executor, gate, content)
                meta.update(more)
            return finish(content, **meta)
    result = agent._max_turns_result(list(state.tool_results), state.turns, usage=state.usage)
    result.metadata.update(
        agent=agent.agent_id, tool_calls=len(state.tool_results), **setup.metadata
    )
    agent._emit_turn_end(run, turns=state.turns, content=result.content, max_turns_exceeded=True)
    return result


def _held(
    calls: Sequence[ToolCall],
    executor: ToolExecutor,
    sources: Sources,
    withheld: Collection[str] = (),
) -> list[dict[str, Any]]:
    """The calls of a reply not to run, each as ``{"tool": name, "invented": {argument:
    value}}`` (values the run was never given, see :func:`invented`), ``{"tool":
    name, "unrelated": True}`` (a name passed to a tool foreign to the request, see
    :func:`unrelated`) or ``{"tool": name, "withheld": True}`` (a tool an earlier held
    call named, no longer offered)."""
    held: list[dict[str, Any]] = []
    for call in calls:
        tool = executor.tools.get(call.name)
        if tool is None:
            continue  # an unknown tool gets the executor's own error
        if call.name in withheld:
            held.append({"tool": call.name, "withheld": True})
            continue
        values = invented(call, tool.spec, sources)
        if values:
            held.append({"tool": call.name, "invented": values})
        elif unrelated(call, tool.spec, sources):
            held.append({"tool": call.name, "unrelated": True})
    return held


def _why_held(
    held: Sequence[Mapping[str, Any]], max_chars: int = 80, *, values: bool = True
) -> str:
    """Why ``held`` were not made; ``values=False`` names the arguments without their
    values (for the model: a made-up value read back is a value it then states)."""

    def shown(value: Any) -> str:
        text = repr(value)
        return text if len(text) <= max_chars else text[: max_chars - 3] + "..."

    reasons = []
    for h in held:
        if "invented" in h:
            if values:
                given = ", ".join(f"{k}={shown(v)}" for k, v in h["invented"].items())
                reason = f"the request does not give the values of {h['tool']}({given})"
            else:
                names = ", ".join(h["invented"])
                reason = f"the request does not give the {names} that {h['tool']} needs"
        elif "withheld" in h:
            reason = f"{h['tool']} was held before and is not offered"
        else:
            reason = f"{h['tool']} does not do what the request asks"
        if reason not in reasons:
            reasons.append(reason)
    return "; ".join(reasons)


def held_note(held: Sequence[Mapping[str, Any]]) -> str:
    """Why the answer turn is asked after held calls (see :func:`_held`); without the
    values held, which the model would otherwise state as its answer."""
    return (
        f"Your tool call was not made: {_why_held(held, values=False)}. Do not make up "
        "values. If you need a value, ask for it; otherwise answer from what you know.\n\n"
    )


def retry_note(held: Sequence[Mapping[str, Any]], others: Sequence[ToolSpec]) -> str:
    """The turn asked again after held calls, with the tools not held still offered:
    why (without the values held), and what is left."""
    names = ", ".join(spec.name for spec in others[:20])
    return (
        f"Your tool call was not made: {_why_held(held, values=False)}. Do not make up "
        f"values. If one of the tools still offered ({names}) answers the request "
        "without them, call it; otherwise answer in plain text."
    )


def held_message(held: Sequence[Mapping[str, Any]]) -> str:
    """The run's answer when the model gave none after held calls: why."""
    return (
        f"No answer: the model's tool call was not made ({_why_held(held)}). "
        "Say what is needed and ask again."
    )


def _unique_calls(step: Step) -> Step:
    """Collapse identical calls within one reply (small models sometimes emit the same
    call a dozen times): each distinct call runs once and appears once in the history."""
    if len(step.calls) < 2:
        return step
    seen: set[tuple[str, str]] = set()
    unique = []
    for call in step.calls:
        key = (call.name, " ".join(call.arguments.split()))
        if key not in seen:
            seen.add(key)
            unique.append(call)
    if len(unique) == len(step.calls):
        return step
    return dataclasses.replace(step, calls=tuple(unique))


ANSWER_NOW = (
    "{input}\n\nThese tool results are already known:\n{results}\n\n{why}"
    "Using these results, answer the request above in plain text. Do not call any tool."
)
#: The same without results (none succeeded, or a held call was the first).
ANSWER_PLAIN = "{input}\n\n{why}Answer the request above in plain text. Do not call any tool."
UNSTATED_NOTE = "Your answer did not state the values these tools returned: state them.\n\n"
BLOCKED_NOTE = (
    "Your last tool call repeated an earlier call with exactly the same arguments, so it "
    "was blocked and not run again: its result is listed above.\n\n"
)


def _known_results(state: LoopState, limit: int = 20, max_chars: int = 1000) -> str:
    """The run's distinct successful tool results as plain lines. Shown without any
    tool-call syntax, which small models would otherwise imitate instead of answering."""
    lines: list[str] = []
    for result in state.tool_results:
        if not result.success:
            continue
        arguments = result.metadata.get("arguments") or {}
        args = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
        line = f"- {result.tool_name}({args}) returned: {result.content[:max_chars]}"
        if line not in lines:
            lines.append(line)
    return "\n".join(lines[-limit:])


async def _answer_turn(
    agent: ToolUsingAgent,
    run: RunContext,
    state: LoopState,
    dialect: Dialect,
    executor: ToolExecutor,
    why: str = "",
    gate: AnswerGate | None = None,
) -> tuple[str, dict[str, Any]]:
    """One generation without tools on a flattened prompt (the request, the known
    results and ``why`` it is asked: a call was blocked, an answer left the results
    out); its text is the answer unless it is yet another call or empty."""
    if any(r.success for r in state.tool_results):
        text = ANSWER_NOW.format(input=state.input, results=_known_results(state), why=why)
    else:
        text = ANSWER_PLAIN.format(input=state.input, why=why)
    prompt = Message.user(text)
    if gate is None or not gate.streams:
        generation = await agent._generate(run, [prompt])
    else:
        engine = RunEngine.bind(agent.engine, run)
        generation = await gate.turn(
            engine.stream([prompt], model=agent.model, options=agent._options())
        )
    state.turns += 1
    state.usage = state.usage + generation.usage
    state.messages.extend([prompt, Message.assistant(generation.content)])
    step = dialect.parse(generation, executor)
    if step.kind == "calls":
        return (
            "Error: the model kept calling tools after it was asked to answer. "
            f"Last reply: {generation.content[:500]!r}",
            {"error": "the model did not stop calling tools", "answer_turn": True},
        )
    text = step.content if step.kind == "final" else agent.strip_think_tags(generation.content)
    if step.kind != "final" and starts_like_a_call(text):  # e.g. a call cut off mid-way
        return (
            "Error: the model wrote a tool call instead of the answer it was asked for. "
            f"Last reply: {generation.content[:500]!r}",
            {"error": "the model did not answer (it wrote a tool call)", "answer_turn": True},
        )
    if not text.strip():
        return (
            "Error: the model gave an empty answer after its tool calls.",
            {"error": "empty answer", "answer_turn": True},
        )
    return text, {"answer_turn": True}


# -- grounded answers ----------------------------------------------------------------

#: A result that is one number, as the calculator and printed code return them.
_RESULT_NUMBER = re.compile(r"[-+]?(\d+(?:,\d{3})*(?:\.\d*)?|\.\d+)(?:[eE]([-+]?\d+))?")
#: A number in an answer: digits with thousands separators, decimals, an exponent.
_ANSWER_NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")
#: Results compared, the newest: bounds the check, as an answer names the last ones.
MAX_COMPARED_RESULTS = 32
#: A longer result is not a number an answer would state (a printed run of digits).
MAX_NUMBER_CHARS = 40


def _numeric_results(results: Sequence[ToolResult]) -> list[float]:
    """The absolute values of the successful results that are one number each (and the
    mantissa of one in scientific notation, which an answer may write as 1.5 x 10^20)."""
    values: list[float] = []
    for result in reversed(results):
        if not result.success or len(result.content) > MAX_NUMBER_CHARS + 8:
            continue
        text = result.content.strip()
        match = _RESULT_NUMBER.fullmatch(text) if len(text) <= MAX_NUMBER_CHARS else None
        if match is None:
            continue
        value = abs(float(match.group(0).replace(",", "")))
        if math.isfinite(value):
            values.append(value)
            if match.group(2) is not None:
                values.append(abs(float(match.group(1).replace(",", ""))))
        if len(values) >= MAX_COMPARED_RESULTS:
            break
    return values


def _states(number: str, values: Sequence[float]) -> bool:
    """Whether ``number``, as written in an answer, is one of ``values``: equal once
    normalised (1,234 is 1234, 42.0 is 42), or equal after rounding to the precision
    shown (15124 or 15123 for 15123.5, 3.14 for 3.14159), or as a percentage (12 for
    0.12, as in "12%")."""
    text = number.replace(",", "")
    value = float(text)
    mantissa = text.split("e")[0].split("E")[0]
    decimals = len(mantissa.partition(".")[2])
    for target in values:
        tolerance = max(0.5 * 10.0**-decimals, 1e-9 * target) * (1 + 1e-9)
        if abs(value - target) <= tolerance or abs(value / 100 - target) <= tolerance / 100:
            return True
    return False


def drops_results(answer: str, results: Sequence[ToolResult]) -> bool:
    """Whether ``answer`` leaves out every value the tools returned, so that asking
    again for the answer stating them may help.

    Conservative, so that a correct answer is never asked again: only results that are
    one number each count (the calculator's, printed code output); and the answer drops
    them only when it holds no number equal to any of them, compared after normalising
    (1,234 is 1234, 42.0 is 42) and rounding to the precision the answer shows. An
    answer that states any one result, even an intermediate one, is kept as it is.
    "This will return the result of 6*7" or "The result is ." drops 42. Linear in the
    length of the answer (at most :data:`MAX_COMPARED_RESULTS` results are compared);
    without results, nothing is read."""
    if not results:
        return False
    numbers = _ANSWER_NUMBER.findall(answer)
    if numbers:
        # The common case, cheaply: a result stated exactly as the tool wrote it.
        written = {r.content.strip() for r in results[-MAX_COMPARED_RESULTS:] if r.success}
        if not written.isdisjoint(numbers):
            return False
    values = _numeric_results(results)
    if not values:
        return False
    return not any(_states(number, values) for number in numbers)


async def _grounded(
    agent: ToolUsingAgent,
    run: RunContext,
    state: LoopState,
    dialect: Dialect,
    executor: ToolExecutor,
    gate: AnswerGate | None,
    answer: str,
) -> tuple[str, dict[str, Any]]:
    """``answer``, or, when it drops the tools' results (:func:`drops_results`), what
    the model answers when asked once more, stating them; with the metadata to add.

    The second answer is returned as the model wrote it, even if it still drops them;
    only when that turn gives no answer at all (a call, an empty reply) is the first
    answer kept. Never asked beyond the agent's ``max_turns``, nor when some of the answer has already gone out as final
    (ReAct and CodeAct stream from ``Final Answer:`` on): what was streamed must stay
    the run's answer, so those runs keep their answer rather than hold it back."""
    if state.turns >= agent.max_turns or (gate is not None and gate.sent):
        return answer, {}
    if not drops_results(answer, state.tool_results):
        return answer, {}
    text, meta = await _answer_turn(agent, run, state, dialect, executor, UNSTATED_NOTE, gate)
    if "error" in meta:
        return answer, {"reasked": True}
    return text, {"reasked": True}
