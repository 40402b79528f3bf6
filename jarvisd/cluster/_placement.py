"""What a task asks of the node that runs it, as Ray custom resources.

Nodes advertise what they have (``ray start --resources '{"jarvis": 4, "docker": 1,
"model:qwen2.5-coder-1.5b": 1}'``); a task asks for one ``jarvis`` slot always, ``docker``
when it runs in a sandbox, and ``model:NAME`` when the embedded engine serves it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from jarvisd._config import Config
    from jarvisd.runs import AgentSpec

__all__ = ["needs", "unmet"]

#: Every jarvis worker node advertises this; one unit is one running task.
JARVIS = "jarvis"
DOCKER = "docker"


def needs(spec: AgentSpec, config: Config) -> dict[str, float]:
    """The resources ``spec`` asks of its node."""
    wanted = {JARVIS: 1.0}
    # A jarvis code run works in a sandbox; so does anything asked to.
    if spec.isolation == "sandbox" or spec.workspace:
        wanted[DOCKER] = 1.0
    engine = spec.engine or config.engine.default
    if engine == "llamacpp":
        model = spec.model or config.engine.model
        if model:
            wanted[f"model:{model}"] = 1.0
    return wanted


def unmet(wanted: Mapping[str, float], nodes: Sequence[Mapping[str, float]]) -> str:
    """Why no node of ``nodes`` (each its total resources) can ever run a task that
    wants ``wanted``; "" when one can."""
    if any(all(node.get(k, 0.0) >= v for k, v in wanted.items()) for node in nodes):
        return ""
    if not nodes:
        return "the Ray cluster has no live node"
    asked = ", ".join(f"{k}={v:g}" for k, v in sorted(wanted.items()))
    return f"no node of the Ray cluster ({len(nodes)} live) has {asked}"
