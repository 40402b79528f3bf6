"""HTTP servers jarvis offers: the Ollama-protocol API over any engine, with jarvis's
agents and teams as models on its OpenAI side (``jarvis serve``)."""

from ._agents import ServedAgents
from ._ollama_api import OllamaServer

__all__ = ["OllamaServer", "ServedAgents"]
