"""The Ollama and OpenAI APIs of ``jarvis serve-model`` (:class:`OllamaServer`) and
``jarvis serve`` (agents and teams as models: :class:`ServedAgents`), as apps of the one
HTTP server (``jarvisd.http``). Names load on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_getattr

if TYPE_CHECKING:
    from ._agents import ServedAgents
    from ._ollama import OllamaServer

_LAZY = {"OllamaServer": "._ollama", "ServedAgents": "._agents"}

__all__ = ["OllamaServer", "ServedAgents"]

__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
