"""Inference engines behind one seam (``Engine.generate``).

Implementations import their heavy dependencies lazily: importing this package is cheap.
"""

from ._base import Engine, ModelInfo
from ._credential import CredentialEngine
from ._cutoff import Cutoff
from ._scripted import ScriptedCall, ScriptedEngine, reply
from ._select import (
    ENGINE_NAMES,
    build_engine,
    engine_for_agent,
    engine_names,
    ollama_reachable,
    select_engine,
)
from ._wrappers import InstrumentedEngine, RunEngine, WrapperEngine

__all__ = [
    "ENGINE_NAMES",
    "CredentialEngine",
    "Cutoff",
    "Engine",
    "InstrumentedEngine",
    "LlamaCppEngine",
    "ModelInfo",
    "OllamaEngine",
    "OpenAIEngine",
    "RunEngine",
    "ScriptedCall",
    "ScriptedEngine",
    "WrapperEngine",
    "build_engine",
    "engine_for_agent",
    "engine_names",
    "ollama_reachable",
    "reply",
    "select_engine",
]


def __getattr__(name: str) -> object:
    # The concrete backends are imported on first use only.
    if name == "LlamaCppEngine":
        from ._llamacpp import LlamaCppEngine

        return LlamaCppEngine
    if name == "OllamaEngine":
        from ._ollama import OllamaEngine

        return OllamaEngine
    if name == "OpenAIEngine":
        from ._openai import OpenAIEngine

        return OpenAIEngine
    raise AttributeError(name)
