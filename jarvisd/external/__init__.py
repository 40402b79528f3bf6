"""External agents: coding agents with a runtime of their own, run as jarvis agents, on
the run's model through an inference gateway, sandboxed by default.

* :class:`ExternalAgent` runs an ACP one (opencode, codex, claude, gemini, or any from
  config; registry: :data:`BUILTIN`, ``[agents.external]``; install: :func:`install`);
* :class:`FramedAgent` runs one of jarvis's frame protocol with one start sequence
  (gateway, definition, sandbox or host): :class:`ClaudeCodeAgent` (the Claude Agent
  SDK over node_bridge) and :class:`OpenHandsAgent` (the OpenHands SDK in its venv);
* :func:`converse` is one ACP conversation with a started agent, its updates mapped
  onto the run, its permission requests answered by a :class:`PermissionPolicy`, its
  file requests confined to a :class:`Workspace`.

Names load on first use: ``jarvis agents list`` needs the registry, not the ACP SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr

if TYPE_CHECKING:
    from ._agent import ExternalAgent
    from ._claude_code import ClaudeCodeAgent
    from ._client import AcpClient
    from ._framed import FramedAgent
    from ._install import agents_dir, install, installed, missing
    from ._kinds import configured_agents, external_agent_class
    from ._mapping import map_update
    from ._openhands import OpenHandsAgent
    from ._permissions import PermissionPolicy, PermissionRequest
    from ._registry import BUILTIN, AgentDefinition
    from ._session import McpServer, converse
    from ._workspace import Workspace

_LAZY = {
    "BUILTIN": "._registry",
    "AcpClient": "._client",
    "AgentDefinition": "._registry",
    "ClaudeCodeAgent": "._claude_code",
    "ExternalAgent": "._agent",
    "FramedAgent": "._framed",
    "McpServer": "._session",
    "OpenHandsAgent": "._openhands",
    "PermissionPolicy": "._permissions",
    "PermissionRequest": "._permissions",
    "Workspace": "._workspace",
    "agents_dir": "._install",
    "configured_agents": "._kinds",
    "converse": "._session",
    "external_agent_class": "._kinds",
    "install": "._install",
    "installed": "._install",
    "map_update": "._mapping",
    "missing": "._install",
}

__all__ = [
    "BUILTIN",
    "AcpClient",
    "AgentDefinition",
    "ClaudeCodeAgent",
    "ExternalAgent",
    "FramedAgent",
    "McpServer",
    "OpenHandsAgent",
    "PermissionPolicy",
    "PermissionRequest",
    "Workspace",
    "agents_dir",
    "configured_agents",
    "converse",
    "external_agent_class",
    "install",
    "installed",
    "map_update",
    "missing",
]

__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
