"""The cluster as a user meets it through the CLI, on the session's real Ray cluster:
``[cluster] require`` and ``jarvis task submit --node-label`` narrow placement, and a
task no node can take is refused at submit, naming what no node has.

Named to run before test_ray_tasks.py, whose last test takes node A away."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from jarvisd.testing import OllamaStandIn

from ..conftest import require
from ..daemon.conftest import DaemonProcess, SlowOnCue, script
from ..sandbox.conftest import engine_problem
from .conftest import RayCluster, ray_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def standin() -> Iterator[OllamaStandIn]:
    with OllamaStandIn(SlowOnCue(fallback=script)) as server:
        yield server


def jarvis(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jarvisd", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_labels_narrow_placement_and_a_task_no_node_can_take_is_refused(
    ray_cluster: RayCluster, standin: OllamaStandIn, isolated_dirs: Path
) -> None:
    daemon = DaemonProcess(isolated_dirs, standin.url)
    # Every task must land on a node labelled zone=b: node B (A is zone=a).
    daemon.write_config("max_concurrent = 4", ray_config(ray_cluster) + 'require = ["zone=b"]\n')
    daemon.start()
    try:
        submitted = [jarvis("task", "submit", f"name a tree {i}") for i in range(3)]
        submitted.append(jarvis("task", "submit", "--node-label", "disk=ssd", "name a rock"))
        assert all(s.returncode == 0 for s in submitted), [s.stderr for s in submitted]
        done = [daemon.client.wait(s.stdout.strip(), timeout=240) for s in submitted]
        assert [d.state for d in done] == ["succeeded"] * 4, [(d.state, d.reason) for d in done]
        # Without the label every task would spread over both nodes.
        assert {d.node for d in done} == {ray_cluster.node_b}, daemon.log_text()

        # A label no node has: refused at submit, saying which, and nothing queued.
        before = len(daemon.client.list_tasks())
        refused = jarvis("task", "submit", "--node-label", "gpu=a100", "name a cloud")
        assert refused.returncode != 0
        assert "none has label gpu=a100" in refused.stderr, refused.stderr
        assert "zone=b" in refused.stderr  # the labels the nodes do have
        assert len(daemon.client.list_tasks()) == before
        # One that contradicts [cluster] require, and one that is not KEY=VALUE.
        clash = jarvis("task", "submit", "--node-label", "zone=a", "x")
        assert "[cluster] require asks for zone=b" in clash.stderr, clash.stderr
        bad = jarvis("task", "submit", "--node-label", "zone", "x")
        assert bad.returncode == 2 and "'zone' is not KEY=VALUE" in bad.stderr
        # jarvis code through the daemon is placed (and refused) the same way.
        project = isolated_dirs / "project"
        project.mkdir()
        (project / "a.py").write_text("x = 1\n")
        code = jarvis("code", "run", str(project), "add y", "--node-label", "gpu=a100")
        assert code.returncode != 0
        assert "none has label gpu=a100" in code.stderr, code.stdout + code.stderr
        assert len(daemon.client.list_tasks()) == before
    finally:
        daemon.terminate()


def test_an_unreachable_cluster_is_said_at_submit_and_the_task_runs_here_or_waits(
    standin: OllamaStandIn, isolated_dirs: Path
) -> None:
    """Nothing listens at 127.0.0.1:9: with ``fallback = "local"`` the task runs on
    this machine; by default it waits for the cluster, saying so, until cancelled."""
    require(importlib.util.find_spec("ray") is not None, "ray is not installed")
    daemon = DaemonProcess(isolated_dirs, standin.url)
    down = '[cluster]\nbackend = "ray"\naddress = "127.0.0.1:9"\n'
    daemon.write_config("", down + 'fallback = "local"\n')
    daemon.start()
    try:
        here = jarvis("task", "submit", "what is red")
        assert here.returncode == 0, here.stderr
        assert "the Ray cluster at 127.0.0.1:9 cannot be reached" in here.stderr, here.stderr
        assert 'runs on this machine ([cluster] fallback = "local")' in here.stderr
        info = daemon.client.wait(here.stdout.strip(), timeout=120)
        assert info.state == "succeeded", (info.reason, daemon.log_text())
        shown = json.loads(jarvis("task", "show", "--json", info.id).stdout)
        assert shown["node"] == "local"
        text = jarvis("task", "show", info.id).stdout
        assert "node:      this machine (the cluster was unreachable" in text, text
        [placed] = [e for e in daemon.client.logs(info.id) if e.event == "task_placed"]
        assert "cannot be reached" in placed.data["fallback"]

        # The default: the task waits for the cluster (never fails for its absence).
        loaded = daemon.client.status().config_loaded_at
        daemon.write_config("", down)
        daemon.wait_for(lambda: daemon.client.status().config_loaded_at != loaded, 30, "reload")
        waits = jarvis("task", "submit", "what is blue")
        assert "the task waits until it can" in waits.stderr, waits.stderr
        task_id = waits.stdout.strip()
        daemon.wait_for(
            lambda: "cluster_waiting" in [e.event for e in daemon.client.logs(task_id)],
            60,
            "the task to say it waits",
        )
        shown = json.loads(jarvis("task", "show", "--json", task_id).stdout)
        assert shown["state"] == "running" and shown["node"] == "ray", shown
        # It tries again (the relay starts itself anew, same process) with all it had.
        relay = psutil.Process(shown["worker_pid"])

        def relay_args() -> list[str]:
            # Empty for a moment while it execs itself (or its stub execs it).
            args = relay.cmdline()
            module = "jarvisd.cluster._relay"
            return args[args.index(module) + 1 :] if module in args else []

        daemon.wait_for(lambda: relay_args()[3:4] == ["wait"], 60, "the relay to try again")
        daemon.wait_for(lambda: relay_args()[2:] == ["{}", "wait", ""], 30, "all its arguments")
        daemon.client.cancel(task_id)
        assert daemon.client.wait(task_id, timeout=60).state == "cancelled"
    finally:
        daemon.terminate()


@pytest.mark.docker
def test_cluster_doctor_checks_every_node_and_names_what_is_wrong(
    ray_cluster: RayCluster, standin: OllamaStandIn, isolated_dirs: Path
) -> None:
    require(not engine_problem(), engine_problem())  # node B's checks use the engine
    config = Path(os.environ["JARVIS_CONFIG_DIR"]) / "config.toml"
    base = f'[engine]\ndefault = "ollama"\n[engine.ollama]\nhost = "{standin.url}"\n'
    config.write_text(base + ray_config(ray_cluster))
    good = jarvis("cluster", "doctor")
    assert good.returncode == 0, good.stdout + good.stderr
    lines = good.stdout.splitlines()
    for node in (ray_cluster.head, ray_cluster.node_a, ray_cluster.node_b):
        # One line per node, each ok.
        assert len([x for x in lines if x.startswith(f"ok   {node[:12]}")]) == 1, good.stdout
    assert "takes no task" in next(x for x in lines if ray_cluster.head[:12] in x)
    assert any("image" in x and "present" in x for x in lines), good.stdout
    assert lines[-1] == f"cluster at {ray_cluster.address}: usable, 2 node(s) take tasks"

    # The sandbox image missing (node B, the one with docker) and the engine's URL
    # unreachable (from every node that takes tasks): exit 1, each named.
    bad = base.replace(standin.url, "http://127.0.0.1:9") + '[sandbox]\nimage = "jarvis-absent:0"\n'
    config.write_text(bad + ray_config(ray_cluster))
    done = jarvis("cluster", "doctor", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    nodes = {n["node"]: n for n in report["nodes"]}
    assert report["ok"] is False and set(nodes) >= {ray_cluster.node_a, ray_cluster.node_b}
    failed = {(node, c["name"]) for node, n in nodes.items() for c in n["checks"] if not c["ok"]}
    assert failed == {
        (ray_cluster.node_a, "engine"),
        (ray_cluster.node_b, "engine"),
        (ray_cluster.node_b, "image"),
    }, report
    assert any("jarvis-absent:0 missing" in p for p in report["problems"])
    assert nodes[ray_cluster.node_b]["labels"] == {"zone": "b", "disk": "ssd"}
