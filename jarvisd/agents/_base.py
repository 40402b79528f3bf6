"""The agent contract: ``arun`` (async, the one required method) and its sync ``run``.

Every agent of one run shares one :class:`RunContext`: the same cancel token, budget
ledger and event bus, however deeply agents nest.
"""

from __future__ import annotations

import abc
import asyncio
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .._errors import EngineResponseError
from .._events import EventBus, EventType
from .._messages import (
    Generation,
    Message,
    SamplingOptions,
    StreamChunk,
    ToolResult,
    ToolSpec,
    Usage,
)
from .._runcontext import RunContext
from ..engines import Engine, RunEngine

__all__ = ["AgentContext", "AgentResult", "BaseAgent", "strip_think_tags"]

_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL | re.IGNORECASE)


def strip_think_tags(text: str) -> str:
    """Remove ``<think>...</think>`` blocks (an unclosed one runs to the end)."""
    if "<" not in text:  # the usual reply: nothing to strip
        return text.strip()
    return _THINK.sub("", text).strip()


class ThinkFilter:
    """Passes streamed text on with ``<think>...</think>`` blocks left out, as
    :func:`strip_think_tags` does for whole replies; a tag may be split across chunks."""

    __slots__ = ("emit", "inside", "pending", "started")

    OPEN, CLOSE = "<think>", "</think>"

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self.pending = ""  # text that may still turn out to be (part of) a tag
        self.inside = False
        self.started = False  # leading whitespace is dropped, as strip_think_tags does

    def feed(self, text: str) -> None:
        if not self.inside and "<" not in text and not self.pending:
            self._out(text)  # the usual chunk: no tag in sight
            return
        buf = self.pending + text
        while buf:
            tag = self.CLOSE if self.inside else self.OPEN
            at = buf.lower().find(tag)
            if at < 0:
                keep = _tag_prefix_len(buf, tag)
                if not self.inside:
                    self._out(buf[: len(buf) - keep])
                buf = buf[len(buf) - keep :]
                break
            if not self.inside:
                self._out(buf[:at])
            buf = buf[at + len(tag) :]
            self.inside = not self.inside
        self.pending = buf

    def flush(self) -> None:
        if not self.inside and self.pending:
            self._out(self.pending)
        self.pending = ""

    def _out(self, text: str) -> None:
        if not self.started:
            text = text.lstrip()
            self.started = bool(text)
        if text:
            self.emit(text)


def _tag_prefix_len(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that begins ``tag`` (case-insensitive)."""
    lowered = text[-(len(tag) - 1) :].lower()
    for size in range(min(len(lowered), len(tag) - 1), 0, -1):
        if tag.startswith(lowered[-size:]):
            return size
    return 0


async def collect(chunks: AsyncIterator[StreamChunk], feed: Callable[[str], None]) -> Generation:
    """Read a stream to its end, passing each piece of text to ``feed``; the whole
    generation from the final ``done`` chunk."""
    final: Generation | None = None
    async for chunk in chunks:
        if chunk.delta:
            feed(chunk.delta)
        if chunk.done:
            final = chunk.generation
    if final is None:
        raise EngineResponseError("the engine's stream ended without its final chunk")
    return final


@dataclass(slots=True)
class AgentContext:
    conversation: list[Message] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    memory_results: list[object] = field(default_factory=list)  # MemoryHits, or text
    metadata: dict[str, object] = field(default_factory=dict)


@dataclass(slots=True)
class AgentResult:
    content: str
    tool_results: list[ToolResult] = field(default_factory=list)
    turns: int = 0
    metadata: dict[str, object] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)

    def to_dict(self) -> dict[str, object]:
        return {
            "content": self.content,
            "tool_results": [r.to_dict() for r in self.tool_results],
            "turns": self.turns,
            "metadata": self.metadata,
            "usage": self.usage.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentResult:
        return cls(
            content=str(data.get("content", "")),
            tool_results=[ToolResult.from_dict(r) for r in data.get("tool_results") or ()],
            turns=int(data.get("turns", 0)),
            metadata=dict(data.get("metadata") or {}),
            usage=Usage.from_dict(data.get("usage") or {}),
        )


class BaseAgent(abc.ABC):
    """Base of every agent. Subclasses implement :meth:`arun`."""

    agent_id: ClassVar[str] = "agent"
    accepts_tools: ClassVar[bool] = False
    #: Runs code it writes; takes ``executor=`` (the runtime passes the configured one).
    runs_code: ClassVar[bool] = False
    #: May fetch URLs; takes ``allow_network=`` (the runtime passes ``tools.allow_network``).
    fetches_urls: ClassVar[bool] = False

    def __init__(
        self,
        engine: Engine,
        model: str = "",
        *,
        bus: EventBus | None = None,
        temperature: float = 0.7,
        max_tokens: int = 1024,
        system_prompt: str | None = None,
    ) -> None:
        self.engine = engine
        self.model = model
        self.bus = bus
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.system_prompt = system_prompt

    @abc.abstractmethod
    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> AgentResult:
        """Run the agent on ``input`` within ``run`` (a new run when None)."""

    def run(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> AgentResult:
        """Synchronous wrapper over :meth:`arun` for scripts and the design's contract."""
        return asyncio.run(self.arun(input, context, run=run))

    # -- helpers shared by the implementations -------------------------------------

    def _run_context(self, run: RunContext | None) -> RunContext:
        if run is not None:
            return run
        return RunContext(bus=self.bus) if self.bus is not None else RunContext()

    def _emit_turn_start(self, run: RunContext, input: str, **data: object) -> None:
        run.bus.publish(
            EventType.AGENT_TURN_START, agent=self.agent_id, input=input, depth=run.depth, **data
        )

    def _emit_turn_end(self, run: RunContext, **data: object) -> None:
        run.bus.publish(EventType.AGENT_TURN_END, agent=self.agent_id, depth=run.depth, **data)

    def _build_messages(
        self,
        input: str,
        context: AgentContext | None = None,
        *,
        system_prompt: str | None = None,
    ) -> list[Message]:
        messages: list[Message] = []
        prompt = system_prompt if system_prompt is not None else self.system_prompt
        if prompt:
            messages.append(Message.system(prompt))
        if context is not None:
            messages.extend(context.conversation)
        messages.append(Message.user(with_context_file(input, context)))
        return messages

    def _options(self, **overrides: Any) -> SamplingOptions:
        values: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return SamplingOptions(**values)

    async def _generate(
        self,
        run: RunContext,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        stream: bool = False,
        model: str | None = None,
        **options: Any,
    ) -> Generation:
        """One engine call under the run's budget and cancel token, with the agent's
        defaults. With ``stream`` and a run that streams, text goes to ``run.on_delta``."""
        engine = RunEngine.bind(self.engine, run)
        sampling = self._options(**options)
        use_model = self.model if model is None else model
        if stream and run.on_delta is not None:
            shown = ThinkFilter(run.on_delta)
            generation = await collect(
                engine.stream(messages, model=use_model, tools=tools, options=sampling),
                shown.feed,
            )
            shown.flush()
            return generation
        return await engine.generate(messages, model=use_model, tools=tools, options=sampling)

    def _max_turns_result(
        self,
        tool_results: list[ToolResult],
        turns: int,
        content: str = "",
        usage: Usage | None = None,
    ) -> AgentResult:
        return AgentResult(
            content=content or f"Stopped after reaching the limit of {turns} turns.",
            tool_results=tool_results,
            turns=turns,
            metadata={"max_turns_exceeded": True},
            usage=usage or Usage(),
        )

    strip_think_tags = staticmethod(strip_think_tags)


def with_context_file(input: str, context: AgentContext | None) -> str:
    """``input`` with the text ``--context FILE`` gave placed before it: an agent that
    has no place of its own for it (rlm keeps it in its REPL) reads it in the prompt,
    rather than running without it and without a word."""
    text = None if context is None else context.metadata.get("context")
    if not isinstance(text, str) or not text:
        return input
    source = context.metadata.get("context_file") if context is not None else None
    label = f"Context (from {source})" if source else "Context"
    return f"{label}:\n{text.rstrip()}\n\n{input}"
