"""Shared test helpers: scripted engines driven directly or through the Ollama stand-in."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from jarvisd._messages import Generation, Message, SamplingOptions, ToolSpec
from jarvisd.engines import Engine, ScriptedEngine, reply
from jarvisd.engines._base import DEFAULT_OPTIONS
from jarvisd.engines._wrappers import WrapperEngine
from jarvisd.testing import OllamaStandIn


@contextlib.contextmanager
def via_ollama(scripted: ScriptedEngine) -> Iterator[Engine]:
    """An OllamaEngine talking real HTTP to a stand-in that answers from ``scripted``."""
    from jarvisd.engines import OllamaEngine

    with OllamaStandIn(scripted) as standin:
        yield OllamaEngine(standin.url, model="scripted", timeout=30)


#: Every scripted test runs twice: on the engine directly, and through the Ollama protocol.
KINDS = ["direct", "ollama"]


@contextlib.contextmanager
def engine_for(kind: str, scripted: ScriptedEngine) -> Iterator[Engine]:
    """``scripted`` itself ("direct"), or an OllamaEngine in front of it ("ollama")."""
    if kind == "ollama":
        with via_ollama(scripted) as engine:
            yield engine
    else:
        yield scripted


def router(root: Sequence[Generation], sub: str = "sub-answer") -> ScriptedEngine:
    """Root turns answer from ``root`` in order; sub-calls (no system message) answer
    ``sub``. Concurrent sub-calls therefore never consume the root's script."""
    queue = list(root)

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if messages and messages[0].role.value == "system":
            return queue.pop(0) if queue else reply("script exhausted")
        return reply(sub)

    return ScriptedEngine(fallback=answer)


class PeakInFlight(WrapperEngine):
    """Counts the calls inside the engine at once: concurrency shown by a count, not by
    a wall-clock bound that a loaded machine can break."""

    def __init__(self, inner: Engine) -> None:
        super().__init__(inner)
        self.active = 0
        self.peak = 0

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            return await self.inner.generate(messages, model=model, tools=tools, options=options)
        finally:
            self.active -= 1
