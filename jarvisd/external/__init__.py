"""External agents: ACP coding agents (opencode, codex, claude, gemini, or any from
config) run as jarvis agents, on the run's model through an inference gateway,
sandboxed by default.

* :class:`ExternalAgent` runs one (registry: :data:`BUILTIN`, ``[agents.external]``;
  install: :func:`install`);
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
    from ._client import AcpClient
    from ._install import agents_dir, install, installed, missing
    from ._kinds import configured_agents, external_agent_class
    from ._mapping import map_update
    from ._permissions import PermissionPolicy, PermissionRequest
    from ._registry import BUILTIN, AgentDefinition
    from ._session import McpServer, converse
    from ._workspace import Workspace

_LAZY = {
    "BUILTIN": "._registry",
    "AcpClient": "._client",
    "AgentDefinition": "._registry",
    "ExternalAgent": "._agent",
    "McpServer": "._session",
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
    "ExternalAgent",
    "McpServer",
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
