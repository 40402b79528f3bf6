"""What a task asks of the node that runs it: Ray custom resources and node labels.

Nodes advertise what they have (``ray start --resources '{"jarvis": 4, "docker": 1,
"model:qwen2.5-coder-1.5b": 1}' --labels 'zone=eu'``); a task asks for one ``jarvis``
slot always, ``docker`` when it runs in a sandbox, ``model:NAME`` when the embedded
engine serves it, plus what ``[cluster] require`` and its own ``--node-label`` say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jarvisd._errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from jarvisd._config import Config
    from jarvisd.runs import AgentSpec

__all__ = ["NodeInfo", "labels", "needs", "split_requirements", "unmet"]

#: Every jarvis worker node advertises this; one unit is one running task.
JARVIS = "jarvis"
DOCKER = "docker"
#: Labels a listing shows at most when it says none matched.
_SHOWN_LABELS = 6


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One live node of the cluster, as a listing (``_probe``) gives it."""

    resources: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_ray(cls, node: Mapping[str, Any]) -> NodeInfo:
        """From one entry of ``ray.nodes()``."""
        return cls(dict(node.get("Resources") or {}), dict(node.get("Labels") or {}))

    def to_dict(self) -> dict[str, Any]:
        return {"resources": dict(self.resources), "labels": dict(self.labels)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeInfo:
        return cls(dict(data.get("resources") or {}), dict(data.get("labels") or {}))

    def fits(self, wanted: Mapping[str, float], labels: Mapping[str, str]) -> bool:
        return all(self.resources.get(k, 0.0) >= v for k, v in wanted.items()) and all(
            self.labels.get(k) == v for k, v in labels.items()
        )


def split_requirements(items: Iterable[str], where: str) -> tuple[dict[str, str], set[str]]:
    """``KEY=VALUE`` entries (node labels) and bare ``NAME``s (resources) apart; a key
    asked with two values is refused, naming ``where`` it was asked."""
    wanted: dict[str, str] = {}
    resources: set[str] = set()
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not key:
            raise UsageError(f"{where}: {item!r} is not KEY=VALUE or NAME")
        if not eq:
            resources.add(key)
            continue
        if wanted.get(key, value) != value:
            raise UsageError(f"{where}: node label {key} asked as {wanted[key]} and as {value}")
        wanted[key] = value
    return wanted, resources


def labels(spec: AgentSpec, config: Config) -> dict[str, str]:
    """The node labels ``spec`` asks for: ``[cluster] require``'s and its own."""
    required, _ = split_requirements(config.cluster.require, "[cluster] require")
    asked, bare = split_requirements(spec.node_labels, "--node-label")
    if bare:
        raise UsageError(f"--node-label: {sorted(bare)[0]!r} is not KEY=VALUE")
    for key, value in asked.items():
        if required.get(key, value) != value:
            raise UsageError(
                f"--node-label {key}={value}: [cluster] require asks for {key}={required[key]}"
            )
    return {**required, **asked}


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
    _, resources = split_requirements(config.cluster.require, "[cluster] require")
    for name in resources:
        wanted.setdefault(name, 1.0)
    return wanted


def unmet(
    wanted: Mapping[str, float],
    nodes: Sequence[NodeInfo],
    labels: Mapping[str, str] | None = None,
) -> str:
    """Why no node of ``nodes`` can ever run a task that wants the resources ``wanted``
    on a node with ``labels``; "" when one can. The reason names what no node has."""
    labels = labels or {}
    if any(node.fits(wanted, labels) for node in nodes):
        return ""
    if not nodes:
        return "the Ray cluster has no live node"
    asked = ", ".join(f"{k}={v:g}" for k, v in sorted(wanted.items()))
    if labels:
        asked += ", " + ", ".join(f"label {k}={v}" for k, v in sorted(labels.items()))
    missing = [
        k for k, v in sorted(wanted.items()) if not any(n.resources.get(k, 0.0) >= v for n in nodes)
    ]
    missing += [
        f"label {k}={v}"
        for k, v in sorted(labels.items())
        if not any(n.labels.get(k) == v for n in nodes)
    ]
    why = f"no node of the Ray cluster ({len(nodes)} live) has {asked}"
    if missing:
        why += f" (none has {', '.join(missing)}"
        seen = sorted(
            {f"{k}={v}" for n in nodes for k, v in n.labels.items() if not k.startswith("ray.io/")}
        )
        if any(m.startswith("label ") for m in missing) and seen:
            why += f"; their labels: {', '.join(seen[:_SHOWN_LABELS])}"
        why += ")"
    else:
        why += " all on one node"
    return why
