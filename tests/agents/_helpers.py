"""Shared test helpers: scripted engines driven directly or through the Ollama stand-in."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from jarvisd._messages import Generation, Message, ToolSpec
from jarvisd.engines import Engine, ScriptedEngine, reply
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
