"""A deterministic engine for tests, shipped with the package so users' tests can use it.

It is a real :class:`Engine`: agents, the Ollama-protocol server and the daemon drive it
exactly as they drive llama.cpp or Ollama.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
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
            from dataclasses import replace

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
        generation = await self.generate(messages, model=model, tools=tools, options=options)
        words = generation.content.split(" ")
        for i, word in enumerate(words):
            piece = word if i == len(words) - 1 else word + " "
            if piece:
                yield StreamChunk(delta=piece)
        yield StreamChunk(done=True, generation=generation)

    async def list_models(self) -> list[ModelInfo]:
        return [ModelInfo(self.model_name, context_length=self.context_window, family="scripted")]

    async def context_length(self, model: str = "") -> int | None:
        return self.context_window

    def default_model(self) -> str:
        return self.model_name
