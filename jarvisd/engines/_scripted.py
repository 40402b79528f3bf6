"""A deterministic engine for tests, shipped with the package so users' tests can use it.

It is a real :class:`Engine`: agents, the Ollama-protocol server and the daemon drive it
exactly as they drive llama.cpp or Ollama.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

from .._errors import EngineError
from .._messages import (
    FinishReason,
    Generation,
    Message,
    SamplingOptions,
    StreamChunk,
    ToolCall,
    ToolSpec,
    Usage,
)
from ._base import DEFAULT_OPTIONS, Engine, ModelInfo
from ._cutoff import Cutoff

__all__ = ["ScriptedCall", "ScriptedEngine", "reply"]

Script = Generation | EngineError | Callable[[Sequence[Message], Sequence[ToolSpec]], Generation]


def reply(
    content: str = "",
    *tool_calls: ToolCall | tuple[str, dict[str, object]],
    usage: Usage | None = None,
) -> Generation:
    """Shorthand for a scripted reply: ``reply("text")``, ``reply("", ("calc", {...}))``."""
    calls = tuple(
        c if isinstance(c, ToolCall) else ToolCall.from_arguments(c[0], c[1]) for c in tool_calls
    )
    return Generation(
        content=content,
        tool_calls=calls,
        usage=usage or Usage(prompt_tokens=10, completion_tokens=max(1, len(content.split()))),
        finish_reason=FinishReason.TOOL_CALLS if calls else FinishReason.STOP,
    )


def _pieces(content: str) -> list[str]:
    """``content`` in the pieces a stream yields: a word each, with its space."""
    words = content.split(" ")
    pieces = [w if i == len(words) - 1 else w + " " for i, w in enumerate(words)]
    return [p for p in pieces if p]


def _cut(generation: Generation, cutoff: Cutoff) -> Generation:
    """``generation`` as far as ``cutoff``, which has read its text, keeps it; its
    native calls come after its text (a backend reports them once they are whole)."""
    if cutoff.cut is None:
        for call in generation.tool_calls:
            if cutoff.call(call):
                break
    if cutoff.cut is None:
        return generation
    content, calls = cutoff.kept()
    return replace(
        generation,
        content=content,
        tool_calls=calls,
        usage=Usage(generation.usage.prompt_tokens, cutoff.tokens),
        finish_reason=FinishReason.TOOL_CALLS if calls else FinishReason.STOP,
    )


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    messages: tuple[Message, ...]
    model: str
    tools: tuple[ToolSpec, ...]
    options: SamplingOptions


@dataclass
class ScriptedEngine(Engine):
    """Answers from a script, in order. Each entry is a Generation, an EngineError to
    raise, or a function of (messages, tools). When the script runs out, ``fallback``
    answers (default: an error, so a test that under-scripts fails loudly)."""

    script: list[Script] = field(default_factory=list)
    fallback: Script | None = None
    latency_s: float = 0.0
    model_name: str = "scripted"
    context_window: int = 8192
    calls: list[ScriptedCall] = field(default_factory=list)
    #: Pieces of text produced so far, a word each (a token, for a real engine): a
    #: reply stopped by ``SamplingOptions.stop_when`` produces only those it needed.
    produced: int = 0

    name: ClassVar[str] = "scripted"

    @classmethod
    def from_replies(cls, replies: Iterable[str | Generation], **kw: object) -> ScriptedEngine:
        return cls(
            script=[reply(r) if isinstance(r, str) else r for r in replies],
            **kw,  # type: ignore[arg-type]
        )

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        generation = await self._next(messages, model, tools, options)
        if options.stop_when is None:
            self.produced += len(_pieces(generation.content))
            return generation
        cutoff = Cutoff(options.stop_when)
        for piece in _pieces(generation.content):
            self.produced += 1
            if cutoff.text(piece):
                break
        return _cut(generation, cutoff)

    async def _next(
        self,
        messages: Sequence[Message],
        model: str,
        tools: Sequence[ToolSpec],
        options: SamplingOptions,
    ) -> Generation:
        self.calls.append(ScriptedCall(tuple(messages), model, tuple(tools), options))
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        entry = self.script.pop(0) if self.script else self.fallback
        if entry is None:
            raise EngineError(f"scripted engine: script exhausted after {len(self.calls)} calls")
        if isinstance(entry, EngineError):
            raise entry
        generation = entry(messages, tools) if callable(entry) else entry
        if not generation.model:
            generation = replace(generation, model=model or self.model_name)
        return generation

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        # Through generate, which subclasses override (a slow engine, a counting one),
        # whole; then a piece counts as produced only when the consumer takes it, as
        # with a real engine: a caller that stops reading stops the generation.
        whole = replace(options, stop_when=None)
        generation = await self.generate(messages, model=model, tools=tools, options=whole)
        pieces = _pieces(generation.content)
        self.produced -= len(pieces)
        cutoff = None if options.stop_when is None else Cutoff(options.stop_when)
        for piece in pieces:
            self.produced += 1
            yield StreamChunk(delta=piece)
            if cutoff is not None and cutoff.text(piece):
                break
        if cutoff is not None:
            generation = _cut(generation, cutoff)
        yield StreamChunk(done=True, generation=generation)

    async def list_models(self) -> list[ModelInfo]:
        return [ModelInfo(self.model_name, context_length=self.context_window, family="scripted")]

    async def context_length(self, model: str = "") -> int | None:
        return self.context_window

    def default_model(self) -> str:
        return self.model_name
