"""Agents: the contract, the registry, the shared tool loop and the built-in agents.

The concrete agents load on first use (``from jarvisd.agents import RLMAgent``)."""

from typing import Any

from ._base import AgentContext, AgentResult, BaseAgent, strip_think_tags
from ._registry import AgentRegistry

__all__ = [
    "AgentContext",
    "AgentRegistry",
    "AgentResult",
    "BaseAgent",
    "Dialect",
    "NativeOpenHandsAgent",
    "NativeReActAgent",
    "OrchestratorAgent",
    "RLMAgent",
    "SimpleAgent",
    "Step",
    "ToolUsingAgent",
    "strip_think_tags",
]

_LAZY = {
    "Dialect": "_toolloop",
    "Step": "_toolloop",
    "ToolUsingAgent": "_toolloop",
    "OrchestratorAgent": "_orchestrator",
    "NativeReActAgent": "_react",
    "NativeOpenHandsAgent": "_codeact",
    "RLMAgent": "_rlm",
    "SimpleAgent": "_simple",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jarvisd.agents' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
