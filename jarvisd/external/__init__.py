"""External agents: ACP coding agents run as jarvis agents.

This is the client side of the Agent Client Protocol: one conversation with a started
agent (:func:`converse`), its updates mapped onto the run, its permission requests
answered by a :class:`PermissionPolicy`, its file requests confined to a
:class:`Workspace`. Names load on first use: the ACP SDK only when an agent runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr

if TYPE_CHECKING:
    from ._client import AcpClient
    from ._mapping import map_update
    from ._permissions import PermissionPolicy, PermissionRequest
    from ._session import McpServer, converse
    from ._workspace import Workspace

_LAZY = {
    "AcpClient": "._client",
    "McpServer": "._session",
    "PermissionPolicy": "._permissions",
    "PermissionRequest": "._permissions",
    "Workspace": "._workspace",
    "converse": "._session",
    "map_update": "._mapping",
}

__all__ = [
    "AcpClient",
    "McpServer",
    "PermissionPolicy",
    "PermissionRequest",
    "Workspace",
    "converse",
    "map_update",
]

__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
