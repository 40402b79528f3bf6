"""The agent classes of external agents: one per built-in (listed in the agent
registry as ``"module:attr"`` strings), and one made on demand for each config entry."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ._agent import ExternalAgent
from ._registry import BUILTIN, AgentDefinition

if TYPE_CHECKING:
    from .._config import Config

__all__ = [
    "ClaudeAgent",
    "CodexAgent",
    "GeminiAgent",
    "OpencodeAgent",
    "configured_agents",
    "external_agent_class",
]


class OpencodeAgent(ExternalAgent):
    """opencode over ACP, sandboxed, on the run's model (npm opencode-ai)."""

    agent_id: ClassVar[str] = "opencode"
    definition: ClassVar[AgentDefinition] = BUILTIN["opencode"]


class CodexAgent(ExternalAgent):
    """OpenAI Codex through codex-acp, sandboxed, on the run's model."""

    agent_id: ClassVar[str] = "codex"
    definition: ClassVar[AgentDefinition] = BUILTIN["codex"]


class ClaudeAgent(ExternalAgent):
    """Claude Code through claude-agent-acp, sandboxed, on the run's model."""

    agent_id: ClassVar[str] = "claude"
    definition: ClassVar[AgentDefinition] = BUILTIN["claude"]


class GeminiAgent(ExternalAgent):
    """Gemini CLI over ACP, sandboxed, on the run's model."""

    agent_id: ClassVar[str] = "gemini"
    definition: ClassVar[AgentDefinition] = BUILTIN["gemini"]


def configured_agents(config: Config) -> dict[str, AgentDefinition]:
    """The external agents ``[agents.external.NAME]`` defines."""
    return {
        name: AgentDefinition(
            name,
            entry.description or f"{entry.protocol} agent from config: {' '.join(entry.command)}",
            protocol=entry.protocol,
            needs_node=False,
            command=tuple(entry.command),
            context=entry.context,
        )
        for name, entry in config.agents.external.items()
    }


def external_agent_class(name: str, config: Config) -> type[ExternalAgent] | None:
    """The agent class of config agent ``name``, or None when the config has none."""
    defined = configured_agents(config).get(name)
    if defined is None:
        return None
    return type(
        f"Configured{name.title().replace('-', '').replace('_', '')}Agent",
        (ExternalAgent,),
        {"agent_id": name, "definition": defined, "__doc__": defined.description},
    )
