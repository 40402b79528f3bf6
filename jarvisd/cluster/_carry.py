"""What travels with a task to its Ray node and back, besides its frames: a ``jarvis
code`` run's workspace (``jarvisd.code._ship``). Used by the relay (Ray imported).

The shipper is named by a ``"module"`` string, resolved on first use: ``cluster/``
sits below ``code/`` and names it without importing it (as ``runs._kinds`` does).
The archive goes through Ray's object store; the node's side runs as Ray tasks pinned
to the node that runs the task's worker, before its start frame and after it ended.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

__all__ = ["WORKSPACE_SHIPPER", "bring_back", "install", "ship_out"]

log = logging.getLogger("jarvisd.cluster.relay")

#: Packs a workspace for a node, installs it there, and brings its change back.
WORKSPACE_SHIPPER = "jarvisd.code._ship"
#: Seconds the node has to install the workspace, or to pack it after the run.
_NODE_S = 300.0


def _shipper() -> Any:
    return importlib.import_module(WORKSPACE_SHIPPER)


def _on(node: str) -> dict[str, Any]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    pin = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
    return {"num_cpus": 0, "scheduling_strategy": pin, "max_retries": 0}


def ship_out(ws_id: str) -> tuple[Any, dict[str, Any]]:
    """The head's workspace, packed (bounded, filtered) into Ray's object store; and
    what it holds (the ``workspace_shipped`` event's data)."""
    import ray

    data = _shipper().pack(ws_id)
    names = _shipper().members(data)
    log.debug("workspace %s ships as %d bytes: %s", ws_id, len(data), names)
    return ray.put(data), {"workspace": ws_id, "bytes": len(data), "members": len(names)}


def install(node: str, shipped: Any) -> None:
    """Unpack the workspace on ``node`` (the archive goes there through the store)."""
    import ray

    ray.get(ray.remote(_shipper().unpack).options(**_on(node)).remote(shipped), timeout=_NODE_S)


def bring_back(node: str, ws_id: str) -> None:
    """The workspace as the run on ``node`` left it, in place of the head's."""
    import ray

    task = ray.remote(_shipper().pack_back).options(**_on(node)).remote(ws_id)
    _shipper().unpack_back(ray.get(task, timeout=_NODE_S))
