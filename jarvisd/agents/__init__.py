"""Agents: the contract, the registry and the built-in agents."""

from ._base import AgentContext, AgentResult, BaseAgent, strip_think_tags
from ._registry import AgentRegistry

__all__ = ["AgentContext", "AgentRegistry", "AgentResult", "BaseAgent", "strip_think_tags"]
