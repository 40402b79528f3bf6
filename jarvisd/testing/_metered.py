"""MeteredEngine: a deterministic engine that spends tokens the way a real one does, and
keeps the truth a run's ledger is checked against.

Its tokenizer is one token a word. Its prompt costs the most the run's ledger allows for
(``engines._tokens.prompt_tokens``: the text counted, plus every chat-template
overhead), read in full as soon as the call starts, so a call cancelled before its reply
has still spent its prompt. Its reply is what ``respond`` says, made exactly as many
tokens long as ``respond`` asks for (``Generation.usage.completion_tokens``; its words,
then ``~`` fillers; a token is a word and the whitespace after it), but never more than the ``max_tokens`` it was given. Streamed, it
spends one token per chunk. ``spent`` adds up everything it really produced.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from .._messages import Generation, Message, SamplingOptions, StreamChunk, ToolSpec, Usage
from ..engines._base import DEFAULT_OPTIONS, Engine
from ..engines._tokens import prompt_tokens

__all__ = ["MeteredEngine"]

Respond = Callable[[Sequence[Message], Sequence[ToolSpec]], Generation]
FILLER = "~"


@dataclass
class MeteredEngine(Engine):
    respond: Respond
    #: Seconds before the first token (calls overlap meanwhile), and between tokens.
    latency_s: float = 0.0
    token_latency_s: float = 0.0
    spent: Usage = field(default_factory=Usage)
    calls: int = 0

    name: ClassVar[str] = "metered"

    def count_tokens(self, text: str, model: str = "") -> int:
        return len(text.split())

    def _start(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: SamplingOptions
    ) -> tuple[int, Generation, list[str]]:
        self.calls += 1
        prompt = prompt_tokens(self, messages, tools)
        self.spent = self.spent + Usage(prompt, 0)
        wanted = self.respond(messages, tools)
        length = min(max(wanted.usage.completion_tokens, 0), options.max_tokens)
        # A token is a word with the whitespace after it, so the text keeps its lines.
        words = re.findall(r"\S+\s*", wanted.content)
        if words and not words[-1][-1].isspace():
            words[-1] += " "
        tokens = (words + [FILLER + " "] * max(length - len(words), 0))[:length]
        return prompt, wanted, tokens

    def _spend(self, completion: int) -> None:
        self.spent = self.spent + Usage(0, completion)

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        prompt, wanted, tokens = self._start(messages, tools, options)
        await asyncio.sleep(self.latency_s + self.token_latency_s * len(tokens))
        self._spend(len(tokens))
        return Generation(
            "".join(tokens).rstrip(),
            wanted.tool_calls,
            Usage(prompt, len(tokens)),
            wanted.finish_reason,
            model or "metered",
        )

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        prompt, wanted, tokens = self._start(messages, tools, options)
        await asyncio.sleep(self.latency_s)
        for token in tokens:
            await asyncio.sleep(self.token_latency_s)
            self._spend(1)
            yield StreamChunk(delta=token)
        generation = Generation(
            "".join(tokens).rstrip(),
            wanted.tool_calls,
            Usage(prompt, len(tokens)),
            wanted.finish_reason,
            model or "metered",
        )
        yield StreamChunk(done=True, generation=generation)
