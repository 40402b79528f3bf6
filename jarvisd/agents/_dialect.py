"""What the tool loop (``_toolloop``) is made of: a :class:`Dialect` reads a reply into a
:class:`Step`; :class:`LoopState` is the checkpointed state of one run (its format is
drawn in ``_toolloop``'s docstring); :class:`LoopSetup` is what one run starts from."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from .._messages import Generation, Message, ToolCall, ToolResult, Usage
from .._runcontext import RunContext
from ..tools import LoopGuard, ToolDispatcher

__all__ = ["STATE_VERSION", "Dialect", "LoopSetup", "LoopState", "Step"]

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

    def system_prompt(self, executor: ToolDispatcher) -> str | None:
        return None

    def stop_when(self, executor: ToolDispatcher) -> Callable[[str], int | None] | None:
        """Where a reply is complete because it holds its whole tool calls (see
        ``SamplingOptions.stop_when``): generation stops there, and the calls run
        without waiting for what the model would write after them. None: never."""
        return None

    @abc.abstractmethod
    def parse(self, generation: Generation, executor: ToolDispatcher) -> Step: ...

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

    def to_dict(self, agent: str) -> dict[str, object]:
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


def _final_of(data: object) -> dict[str, Any] | None:
    """A saved answer, or None when there is none (or it is not one)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("content"), str):
        return None
    meta = data.get("meta")
    return {"content": data["content"], "meta": dict(meta) if isinstance(meta, Mapping) else {}}


@dataclass(slots=True)
class LoopSetup:
    """Everything one run of the loop needs; ``close`` releases per-run resources."""

    dialect: Dialect
    executor: ToolDispatcher
    messages: list[Message]
    close: Callable[[], Awaitable[None]] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
