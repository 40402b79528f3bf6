"""Stopping a reply where ``SamplingOptions.stop_when`` says it is complete.

An engine that streams feeds each piece of text, and each tool call its backend
reports whole, to a :class:`Cutoff`; once the reply so far is complete, the engine
stops reading (closing its stream is what stops the model: a worker thread's stop
flag, a closed HTTP response) and builds its generation from what the cutoff kept.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable

from .._errors import EngineResponseError
from .._messages import Generation, StreamChunk, ToolCall

__all__ = ["Cutoff", "streamed_generation"]


async def streamed_generation(chunks: AsyncIterator[StreamChunk]) -> Generation:
    """The generation a stream ends with: how ``generate`` honours ``stop_when`` on
    backends whose one-shot call cannot be stopped part way."""
    # Closed here, not left to the garbage collector: an HTTP stream closes in the task
    # that opened it.
    async with contextlib.aclosing(chunks):  # type: ignore[type-var]
        async for chunk in chunks:
            if chunk.done and chunk.generation is not None:
                return chunk.generation
    raise EngineResponseError("the engine's stream ended without its final chunk")


class Cutoff:
    """The reply read so far, as text and tool calls in the order they came, and
    whether ``stop_when`` ends it. A native call is shown to ``stop_when`` as the JSON
    object ``{"name": ..., "arguments": ...}``, as a model writes a call into text."""

    __slots__ = ("_calls", "_check", "_segments", "cut", "tokens")

    def __init__(self, stop_when: Callable[[str], int | None]) -> None:
        self._check = stop_when
        self._segments: list[tuple[str, ToolCall | None]] = []
        self._calls = 0
        self.cut: int | None = None  # where the reply ends, once it is complete
        self.tokens = 0  # pieces read: a token each for engines that stream tokens

    def text(self, piece: str) -> bool:
        """Read a piece of text; True once the reply is complete."""
        self.tokens += 1
        self._segments.append((piece, None))
        return self._complete()

    def call(self, call: ToolCall) -> bool:
        """Read a call the backend reported whole; True once the reply is complete."""
        rendered = json.dumps({"name": call.name, "arguments": call.arguments_dict()})
        self._segments.append((rendered, call))
        self._calls += 1
        return self._complete()

    def _complete(self) -> bool:
        if self.cut is None:
            self.cut = self._check("".join(s for s, _ in self._segments))
        return self.cut is not None

    def kept(self) -> tuple[str, tuple[ToolCall, ...]]:
        """The text and the native calls before the cut (all of them without one)."""
        text: list[str] = []
        calls: list[ToolCall] = []
        offset = 0
        for segment, call in self._segments:
            left = len(segment) if self.cut is None else self.cut - offset
            if left <= 0:
                break
            if call is None:
                text.append(segment[:left])
            elif left >= len(segment):
                calls.append(call)
            offset += len(segment)
        return "".join(text), tuple(calls)
