"""HTTP servers jarvis offers: the Ollama-protocol API over any engine."""

from ._ollama_api import OllamaServer

__all__ = ["OllamaServer"]
