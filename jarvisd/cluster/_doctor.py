"""``jarvis cluster doctor``: every node of the Ray cluster checked where it stands.

:func:`doctor` runs ``python -m jarvisd.cluster._doctor ADDRESS`` (a child process, so
the CLI never imports Ray); the child connects, lists the nodes and runs
``_nodecheck.check_node`` on each, pinned there, in parallel and bounded, and prints
one JSON :class:`Report`. What travels to the nodes is the config's sandbox and engine
sections (``node_config``): nothing secret.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from jarvisd.sandbox._doctor import Check

from ._placement import JARVIS, NodeInfo

if TYPE_CHECKING:
    from jarvisd._config import Config

__all__ = ["NodeReport", "Report", "doctor"]

#: Seconds every node has, together, to answer its checks.
NODE_CHECK_S = 60.0
#: Seconds the whole child may take (connect, list, check).
_DOCTOR_S = 120.0


@dataclass(frozen=True, slots=True)
class NodeReport:
    node: str
    address: str
    #: It takes jarvis tasks (has the ``jarvis`` resource); others are listed only.
    worker: bool
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeReport:
        checks = [Check(**c) for c in data.get("checks") or ()]
        fields = {k: data[k] for k in ("node", "address", "worker", "resources", "labels")}
        return cls(**fields, checks=checks)


@dataclass(frozen=True, slots=True)
class Report:
    address: str
    nodes: list[NodeReport] = field(default_factory=list)
    #: Why the cluster could not be checked at all ("" when it was).
    problem: str = ""

    @property
    def problems(self) -> list[str]:
        """Each thing wrong, one line each (empty: the cluster is usable)."""
        if self.problem:
            return [self.problem]
        found = [
            f"node {n.node[:12]} ({n.address}): {c.name}: {c.detail}"
            for n in self.nodes
            for c in n.checks
            if not c.ok
        ]
        if not any(n.worker for n in self.nodes):
            found.append(f"no node has the {JARVIS} resource: no task can be placed")
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "ok": not self.problems,
            "problems": self.problems,
            "nodes": [n.to_dict() for n in self.nodes],
        }


def doctor(config: Config) -> Report:
    """Check the cluster ``[cluster] address`` names, in a child process."""
    address = config.cluster.address
    try:
        done = subprocess.run(
            [sys.executable, "-m", "jarvisd.cluster._doctor", address],
            capture_output=True,
            text=True,
            timeout=_DOCTOR_S,
            check=False,
            env={**os.environ, "JARVIS_CONFIG": config.source} if config.source else None,
        )
    except subprocess.TimeoutExpired:
        return Report(address, problem=f"the check of {address} took over {_DOCTOR_S:g} s")
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return Report(address, problem=why[0])
    data = json.loads(done.stdout)
    return Report(address, [NodeReport.from_dict(n) for n in data])


def _run(address: str) -> list[NodeReport]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from jarvisd._config import load_config
    from jarvisd._version import __version__

    # By reference (its module), never this one: run with -m, this one is __main__.
    from ._nodecheck import check_node, node_config

    config = node_config(load_config())
    nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    remote = ray.remote(check_node)
    pending: dict[Any, NodeReport] = {}  # ObjectRef -> its node's report
    reports: list[NodeReport] = []
    for raw in nodes:
        info = NodeInfo.from_ray(raw)
        report = NodeReport(
            str(raw["NodeID"]),
            str(raw.get("NodeManagerAddress", "?")),
            info.resources.get(JARVIS, 0.0) >= 1,
            dict(info.resources),
            {k: v for k, v in info.labels.items() if not k.startswith("ray.io/")},
        )
        reports.append(report)
        if not report.worker:  # it takes no task: listed, not checked
            continue
        pin = NodeAffinitySchedulingStrategy(node_id=report.node, soft=False)
        ref = remote.options(num_cpus=0, scheduling_strategy=pin, max_retries=0).remote(
            config, report.resources, __version__
        )
        pending[ref] = report
    ready, late = ray.wait(list(pending), num_returns=len(pending), timeout=NODE_CHECK_S)
    for ref in ready:
        try:
            checks: list[Check] = ray.get(ref)
            pending[ref].checks.extend(checks)
        except Exception as exc:  # the node died, or jarvisd does not import there
            why = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
            pending[ref].checks.append(
                Check("reachable", False, f"its check failed: {why[0][:300]}", _FIX_NODE)
            )
    for ref in late:
        pending[ref].checks.append(
            Check("reachable", False, f"did not answer within {NODE_CHECK_S:g} s", _FIX_NODE)
        )
    return reports


_FIX_NODE = "check the node's raylet and that jarvisd[cluster] is installed in its Python"


def main(argv: list[str]) -> int:
    from ._relay import connect, keep_loopback

    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # Ray's own output is not the answer
    keep_loopback(argv[0])
    try:
        import ray  # noqa: F401
    except ImportError:
        print(
            "[cluster] backend = \"ray\" needs Ray: pip install 'jarvisd[cluster]'", file=sys.stderr
        )
        return 1
    why = connect(argv[0])
    if why:
        print(why, file=sys.stderr)
        return 1
    try:
        reports = _run(argv[0])
    except Exception as exc:
        print(f"the Ray cluster at {argv[0]} could not be checked: {exc}", file=sys.stderr)
        return 1
    out.write(json.dumps([r.to_dict() for r in reports]))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
