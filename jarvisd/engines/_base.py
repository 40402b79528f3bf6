"""The engine seam: one required method, ``generate``; everything else optional."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from .._messages import Generation, Message, SamplingOptions, StreamChunk, ToolSpec

__all__ = ["Engine", "ModelInfo", "tls_verify"]

DEFAULT_OPTIONS = SamplingOptions()


def tls_verify(url: str) -> bool:
    """httpx's ``verify`` for a server at ``url``: a plain-HTTP server (a local engine)
    needs no CA bundle, and loading one costs tens of milliseconds per client."""
    return not url.lower().startswith("http://")


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    size: int = 0
    context_length: int | None = None
    family: str = ""
    details: str = ""


class Engine(abc.ABC):
    """Generates replies from messages.

    Implementations translate their backend's errors into ``EngineError`` subclasses
    once, inside ``generate``/``stream``; callers never see httpx, ollama or llama_cpp
    exceptions. Constructing an engine does no I/O; ``aclose`` releases what it opened.
    """

    name: ClassVar[str] = "engine"

    @abc.abstractmethod
    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        """Return the model's reply to ``messages``. ``model=""`` is the engine default."""

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        """Yield text as it is produced, then a final ``done`` chunk with the whole
        generation. Engines without native streaming yield the reply in one piece."""
        generation = await self.generate(messages, model=model, tools=tools, options=options)
        if generation.content:
            yield StreamChunk(delta=generation.content)
        yield StreamChunk(done=True, generation=generation)

    async def health(self) -> bool:
        """True when the engine can serve now (reachable, model loadable)."""
        return True

    async def list_models(self) -> list[ModelInfo]:
        return []

    async def context_length(self, model: str = "") -> int | None:
        """The model's real context window in tokens, when the engine knows it."""
        return None

    def count_tokens(self, text: str, model: str = "") -> int | None:
        """How many tokens ``text`` takes for ``model`` by the engine's own tokenizer,
        special-token syntax counted as plain text. Cheap and without I/O: None when no
        tokenizer is at hand (not loaded yet, a remote model); the run's ledger then
        bounds the count by the text's UTF-8 bytes (see ``engines._tokens``)."""
        return None

    def default_model(self) -> str:
        return ""

    async def reserve_context(self, tokens: int) -> None:  # noqa: B027 - optional hook
        """Make the context window at least ``tokens`` where the engine sizes its own
        (the embedded one), as far as the model and memory allow: a run that knows its
        first prompt is large says so before it starts. Others ignore it."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release connections, processes or loaded weights."""
