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
its own answer as the last message, nor re-run rlm's cells up to a repeated FINAL). Agents with process state (rlm's REPL) say it is
gone in ``Dialect.resume``: nothing is replayed.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Awaitable, Sequence
from typing import Any, ClassVar

from .._events import EventBus
from .._grounding import Sources
from .._messages import Generation, Message, Role, ToolResult, ToolSpec
from .._runcontext import RunContext, RunStopped
from ..engines import Engine, RunEngine
from ..tools import BaseTool, LoopGuard, ToolDispatcher, cancelled_result
from ._answer import AnswerGate
from ._base import AgentContext, AgentResult, BaseAgent
from ._dialect import Dialect, LoopSetup, LoopState, Step
from ._fit import estimate_tokens, fit_messages
from ._held import HeldCall, find_held, held_message, held_note, retry_note
from ._reask import BLOCKED_NOTE, answer_turn, drops_results, grounded

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
        self._default_executor: ToolDispatcher | None = None
        self._default_executor = self._executor()

    @abc.abstractmethod
    def dialect(self) -> Dialect: ...

    def _executor(self, extra: Sequence[BaseTool] = ()) -> ToolDispatcher:
        cached = self._default_executor
        if (
            not extra
            and cached is not None
            and list(cached.tools.values()) == self.tools
            and cached.timeout == self.tool_timeout
        ):
            return cached
        return ToolDispatcher([*self.tools, *extra], bus=self.bus, timeout=self.tool_timeout)

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
    loop = await _Loop.open(agent, setup, input, run)
    return await loop.drive()


class _Loop:
    """One run of the loop: its state and what every turn shares. A turn is
    :meth:`drive`'s body; a reply is handled by :meth:`_invalid`, :meth:`_hold` or
    :meth:`_calls`, each of which returns the run's result or None to go on."""

    def __init__(
        self, agent: ToolUsingAgent, setup: LoopSetup, run: RunContext, state: LoopState
    ) -> None:
        self.agent, self.setup, self.run, self.state = agent, setup, run, state
        self.dialect, self.executor = setup.dialect, setup.executor
        # Whether a tool's result may be the run's answer (rlm's FINAL()): not unless
        # the dialect says how, and then it is asked after every turn's calls.
        self.tools_answer = type(self.dialect).final_from_results is not Dialect.final_from_results
        self.resumed = False
        self.specs: Sequence[ToolSpec] = ()
        self.budget: int | None = None
        self.sized = 0  # messages already sized (the history only grows) ...
        self.tokens = 0  # ... and their estimated tokens
        self.known = {r.content for r in state.tool_results if r.success}  # results it has
        # What the run was given, for the calls' values (see _grounding): the task and the
        # conversation, the agent's own instructions, then each tool result as it comes.
        self.sources = Sources([agent.system_prompt or ""])
        self.indexed = 0
        # What agent._generate would do each turn, done once: every turn is alike.
        self.engine = RunEngine.bind(agent.engine, run)
        self.sampling = agent._options(
            stop=self.dialect.stop or None, stop_when=self.dialect.stop_when(self.executor)
        )
        # Streaming runs pass their answer through the gate; a turn is generated as a
        # stream when some of it may go out while it is generated.
        self.gate = (
            None if run.on_delta is None else AnswerGate(run.on_delta, self.dialect.answer_so_far)
        )
        # Tools a held call named: not offered again, and a later call to one is held too.
        self.withheld: set[str] = set()
        self.held_so_far: list[HeldCall] = []
        #: While a turn's reply is awaited, the ledger's calls before it; else None.
        self.in_flight: int | None = None

    @classmethod
    async def open(
        cls, agent: ToolUsingAgent, setup: LoopSetup, input: str, run: RunContext
    ) -> _Loop:
        resumed = False
        if run.resume is not None and run.resume.get("agent") == agent.agent_id:
            state = LoopState.from_dict(run.resume)
            resumed = True
            if state.final is None:  # an answered run needs nothing rebuilt (see below)
                await setup.dialect.resume(state, run)
        else:
            state = LoopState(input, list(setup.messages), LoopGuard(agent.max_repeats))
        loop = cls(agent, setup, run, state)
        loop.resumed = resumed
        agent._emit_turn_start(run, input, resumed=resumed)
        specs: Sequence[ToolSpec] = setup.executor.specs if setup.dialect.offers_tools else ()
        loop.specs = specs
        window = await agent.engine.context_length(agent.model)
        if window:
            # An estimate like estimate_tokens: repr is as long as JSON here, and cheaper.
            spec_tokens = (
                sum(len(s.name) + len(s.description) + len(repr(s.parameters)) + 60 for s in specs)
                // 3
            )
            loop.budget = max(window - agent.max_tokens - spec_tokens - 64, 256)
        return loop

    def save(self) -> None:
        if self.run.checkpoint is not None:
            self.run.checkpoint(self.state.to_dict(self.agent.agent_id))

    def finish(self, content: str, **meta: Any) -> AgentResult:
        state, agent = self.state, self.agent
        if self.held_so_far:  # a run that answered after a held call says it held one
            meta.setdefault("held_calls", list(self.held_so_far))
        if state.final is None:
            # The answer is saved before anything says the run ended: from here on a
            # resume returns it (no more turns), whatever happens before the task ends.
            state.final = {"content": content, "meta": dict(meta)}
            self.save()
        metadata = {
            "agent": agent.agent_id,
            "tool_calls": len(state.tool_results),
            "recovered_calls": state.recovered_calls,
            "blocked_calls": sum(1 for r in state.tool_results if r.metadata.get("blocked")),
            **self.setup.metadata,
            **meta,
        }
        if self.resumed:
            metadata["resumed"] = True
        agent._emit_turn_end(
            self.run,
            turns=state.turns,
            content=content,
            **{k: v for k, v in meta.items() if k == "error"},
        )
        if self.gate is not None and "error" not in meta:
            self.gate.close(content)
        return AgentResult(content, list(state.tool_results), state.turns, metadata, state.usage)

    async def drive(self) -> AgentResult:
        try:
            return await self._drive()
        except RunStopped as exc:
            # A run stopped by its budget mid-reply still had the replies it got and the
            # one in flight: its outcome says so (it said 0 turns after 600 s of replies).
            # A call the budget refused before it started (the ledger did not count it)
            # was never in flight.
            started = self.in_flight is not None and self.run.budget.calls > self.in_flight
            exc.turns = self.state.turns + started
            raise

    async def _drive(self) -> AgentResult:
        state, agent = self.state, self.agent
        if state.final is not None:  # resumed after the answer: end with it
            return self.finish(state.final["content"], **state.final["meta"])
        cancel = self.run.cancel
        while state.turns < agent.max_turns:
            if cancel.cancelled:  # raise_if_cancelled(), inline: once a turn
                raise cancel.error()
            self.in_flight = self.run.budget.calls
            generation = await self._request()
            self.in_flight = None
            state.turns += 1
            # Added in place: the state's own Usage (LoopState makes a new one), read by
            # nothing else until the run ends.
            usage, used = state.usage, generation.usage
            usage.prompt_tokens += used.prompt_tokens
            usage.completion_tokens += used.completion_tokens
            step = self.dialect.parse(generation, self.executor)
            if step.kind == "final":
                # Not saved before finish(): a state whose last message is the answer but
                # not marked final would be resumed into one more turn (asked with its own
                # answer). A crash before then re-asks this turn, which ran no tool.
                state.messages.append(Message.assistant(generation.content))
                content, meta = await self._grounded(step.content)
                return self.finish(content, **meta)
            if step.kind == "invalid":
                result = self._invalid(step, generation)
            else:
                state.reprompts = 0
                if len(step.calls) > 1:
                    step = _unique_calls(step)
                held = (
                    find_held(step.calls, self.executor, self.sources, self.withheld)
                    if self.dialect.holds_ungrounded
                    else []
                )
                if held:
                    result = await self._hold(held, generation)
                else:
                    result = await self._calls(step, generation)
            if result is not None:
                return result
        result = agent._max_turns_result(list(state.tool_results), state.turns, usage=state.usage)
        result.metadata.update(
            agent=agent.agent_id, tool_calls=len(state.tool_results), **self.setup.metadata
        )
        agent._emit_turn_end(
            self.run, turns=state.turns, content=result.content, max_turns_exceeded=True
        )
        return result

    def _request(self) -> Awaitable[Generation]:
        """One turn's engine call, on the history fitted to the context window: the
        awaitable of its reply (awaited by :meth:`drive`, which counts the turn and its
        usage; no coroutine of its own a turn)."""
        state, agent = self.state, self.agent
        for message in state.messages[self.indexed :]:
            # The system one is the dialect's prompt; an empty one (calls only) says nothing.
            if message.content and message.role is not Role.SYSTEM:
                self.sources.add(message.content)
        self.indexed = len(state.messages)
        messages = list(state.messages)
        specs, withheld = self.specs, self.withheld
        offered = [s for s in specs if s.name not in withheld] if withheld else specs
        if self.budget:
            for message in messages[self.sized :]:  # size only what was appended since
                self.tokens += estimate_tokens(message)
            self.sized = len(messages)
            if self.tokens > self.budget:
                messages = fit_messages(messages, self.budget)
        if self.gate is None or not self.gate.streams:
            return self.engine.generate(
                messages, model=agent.model, tools=offered, options=self.sampling
            )
        return self.gate.turn(
            self.engine.stream(messages, model=agent.model, tools=offered, options=self.sampling)
        )

    def _invalid(self, step: Step, generation: Generation) -> AgentResult | None:
        """An unreadable reply: one corrective re-prompt, an error the second time."""
        state = self.state
        state.messages.append(Message.assistant(generation.content))
        if state.reprompts >= 1:
            return self.finish(
                f"Error: the model's reply could not be used twice in a row ({step.error}). "
                f"Last reply: {generation.content[:500]!r}",
                error=f"unparseable model output: {step.error}",
            )
        state.reprompts += 1
        state.messages.append(Message.user(self.dialect.corrective(step)))
        self.save()
        return None

    async def _hold(self, held: list[HeldCall], generation: Generation) -> AgentResult | None:
        """Calls not run: a call on values nobody gave, or on a tool foreign to the
        request, answers nothing (a "last world cup" looked up for a made-up team, a
        hexagon's sides as a boiling point). Once, the turn is asked again with the
        other tools (one may need no made-up value: the current time, not a conversion
        of an invented one); then one turn without tools answers."""
        state, agent = self.state, self.agent
        first_hold = not self.withheld
        self.withheld.update(h["tool"] for h in held)
        self.held_so_far.extend(held)
        others = [s for s in self.specs if s.name not in self.withheld]
        if first_hold and others and state.turns < agent.max_turns:
            # The held reply stays out of the history: it holds the made-up values.
            state.messages.append(Message.user(retry_note(held, others)))
            self.save()
            return None
        insisted = not first_hold and all("withheld" in h for h in held)
        held = self.held_so_far
        state.messages.append(Message.assistant(generation.content))
        if insisted or state.turns >= agent.max_turns:  # no answer will come of another
            return self.finish(held_message(held), held_calls=held)
        content, more = await self._answer_turn(held_note(held))
        if "error" in more:  # it called again: say what is missing instead
            more.pop("error")
            content = held_message(held)
        return self.finish(content, held_calls=held, **more)

    async def _calls(self, step: Step, generation: Generation) -> AgentResult | None:
        """Run the reply's calls; the run ends here on a tool's final answer, or with
        one turn without tools when the calls brought nothing new."""
        state, run = self.state, self.run
        if step.recovered:
            state.recovered_calls += len(step.calls)
        state.messages.append(self.dialect.assistant_message(generation, step))
        calls, executor = step.calls, self.executor
        try:
            if len(calls) == 1 and executor.inline.get(calls[0].name):
                # execute_all's usual turn (one call to an inline tool), without its
                # coroutine: the call runs in this task either way.
                results = [await executor.execute(calls[0], run, state.guard)]
            else:
                results = await executor.execute_all(calls, run, state.guard)
        except BaseException:
            # The history must never hold a call without a result, even when the run
            # stops in the middle of a tool.
            results = [cancelled_result(c) for c in step.calls]
            state.messages.extend(self.dialect.result_messages(step, results))
            self.save()
            raise
        no_progress = True
        known = self.known
        for r in results:
            if not (r.metadata.get("blocked") or (r.success and r.content in known)):
                no_progress = False
        for r in results:
            if r.success:
                known.add(r.content)
        state.tool_results.extend(results)
        state.messages.extend(self.dialect.result_messages(step, results))
        final = self.dialect.final_from_results(results) if self.tools_answer else None
        if final is not None and not run.cancel.cancelled:
            return self.finish(final, final_from_tool=True)  # saved once, as the answer
        if run.checkpoint is not None:
            self.save()
        if run.cancel.cancelled:
            raise run.cancel.error()
        if not no_progress or state.turns >= self.agent.max_turns:
            return None  # the loop goes on, or ends on max_turns
        return await self._no_progress(results)

    async def _no_progress(self, results: Sequence[ToolResult]) -> AgentResult:
        # Nothing new this turn: every call was blocked as a repeat, or returned a
        # result the model already had (small local models feed a result back into
        # the tool). One turn without tools asks for the answer instead.
        why = BLOCKED_NOTE if any(r.metadata.get("blocked") for r in results) else ""
        content, meta = await self._answer_turn(why)
        if "error" not in meta:
            content, more = await self._grounded(content)
            meta.update(more)
        return self.finish(content, **meta)

    async def _answer_turn(self, why: str) -> tuple[str, dict[str, Any]]:
        return await answer_turn(
            self.agent, self.run, self.state, self.dialect, self.executor, why, self.gate
        )

    async def _grounded(self, answer: str) -> tuple[str, dict[str, Any]]:
        return await grounded(
            self.agent, self.run, self.state, self.dialect, self.executor, self.gate, answer
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
