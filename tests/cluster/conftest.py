"""A real Ray cluster on this machine for the whole session (every module of
tests/cluster shares it): a head that runs no task plus two worker nodes, each a real
raylet with its own custom resources and labels. test_ray_tasks.py's last test takes
node A away: modules that run after it (by name) must not need node A.

Its processes take their environment from here: jarvis's directories in a temporary
folder (a worker on a node writes its traces there, never to the developer's), and
every address on loopback. Under CI a missing ``ray`` is a failure (``require``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import pytest

from jarvisd._paths import ENV_VARS

from ..conftest import require

#: Each worker node's resources: both take jarvis tasks; only B has a docker engine.
NODE_A = {"jarvis": 4.0, "node_a": 1.0}
NODE_B = {"jarvis": 4.0, "node_b": 1.0, "docker": 1.0}
#: And its labels (`ray start --labels`): placement by `--node-label`/`[cluster] require`.
LABELS_A = {"zone": "a"}
LABELS_B = {"zone": "b", "disk": "ssd"}


@dataclass(frozen=True)
class RayCluster:
    address: str
    head: str
    node_a: str
    node_b: str
    handle: object  # ray.cluster_utils.Cluster
    #: The data directory its nodes' processes were given (JARVIS_DATA_DIR).
    data_dir: str

    def workers(self) -> list[int]:
        """Task workers running on its nodes (found by the data directory they have)."""
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if "jarvisd.daemon._worker" not in (proc.info["cmdline"] or []):
                    continue
                if proc.environ().get("JARVIS_DATA_DIR") == self.data_dir:
                    found.append(proc.pid)
            except psutil.Error:
                continue
        return found


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    require(
        importlib.util.find_spec("ray") is not None,
        "ray is not installed (pip install 'jarvisd[cluster]'; setup.sh --test does)",
    )
    from ray.cluster_utils import Cluster

    root = tmp_path_factory.mktemp("ray")
    with pytest.MonkeyPatch.context() as env:
        for key, var in ENV_VARS.items():
            (root / key).mkdir(mode=0o700)
            env.setenv(var, str(root / key))
        env.setenv("OLLAMA_HOST", "http://127.0.0.1:9")
        env.setenv("RAY_USAGE_STATS_ENABLED", "0")
        env.setenv("RAY_DISABLE_DOCKER_CPU_WARNING", "1")
        common = {"node_ip_address": "127.0.0.1", "num_cpus": 1}
        cluster = Cluster(
            initialize_head=True,
            head_node_args={**common, "num_cpus": 0, "include_dashboard": False},
        )
        a = cluster.add_node(**common, resources=NODE_A, labels=LABELS_A)
        b = cluster.add_node(**common, resources=NODE_B, labels=LABELS_B)
        cluster.wait_for_nodes()
    try:
        yield RayCluster(
            cluster.address,
            cluster.head_node.node_id,
            a.node_id,
            b.node_id,
            cluster,
            str(root / "data"),
        )
    finally:
        cluster.shutdown()


def ray_config(cluster: RayCluster) -> str:
    return f'[cluster]\nbackend = "ray"\naddress = "{cluster.address}"\n'
