"""``jarvis code`` through a real jarvisd whose tasks run on the session's real Ray
cluster: the workspace goes to node B (the one with a container engine) as an archive
through Ray's object store, the scripted CodeAct agent fixes the project there in its
sandbox, the change comes back, and ``jarvis code apply`` works on the head.

The node's processes have their own state directory (the cluster's), so the run there
cannot read the head's workspace: only what was shipped."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jarvisd.engines import ScriptedEngine
from jarvisd.testing import OllamaStandIn

from ..code.conftest import FIXED, project, tree_hashes
from ..code.test_daemon import fixer
from ..code.test_run import TEST_COMMAND
from ..conftest import require
from ..daemon.conftest import DaemonProcess
from ..sandbox.conftest import engine_problem
from .conftest import RayCluster, ray_config

pytestmark = [pytest.mark.slow, pytest.mark.docker]
__all__ = ["project"]  # the fixture, from tests/code


@pytest.fixture(scope="module")
def standin() -> Iterator[OllamaStandIn]:
    with OllamaStandIn(ScriptedEngine(fallback=fixer)) as server:
        yield server


def jarvis(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvisd", *args], capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip


def test_code_runs_on_a_worker_node_and_its_change_is_applied_on_the_head(
    ray_cluster: RayCluster,
    standin: OllamaStandIn,
    isolated_dirs: Path,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require(not engine_problem(), engine_problem())
    (project / ".env").write_text("API_KEY=never-leaves-the-head\n")
    before = tree_hashes(project)
    monkeypatch.setenv("JARVISD_WORKER_LOG", "DEBUG")  # the relay logs what it ships
    daemon = DaemonProcess(isolated_dirs, standin.url)
    daemon.write_config("max_concurrent = 2", ray_config(ray_cluster))
    daemon.start()
    try:
        done = jarvis("code", str(project), "fix the failing test", "--test", TEST_COMMAND)
        assert done.returncode == 0, done.stdout + done.stderr + daemon.log_text()
        assert "running as jarvisd task" in done.stderr
        assert "+    return a + b" in done.stdout and "test after:  passed" in done.stdout

        (ws,) = json.loads(jarvis("code", "list", "--json").stdout)
        assert ws["state"] == "done"
        task = daemon.client.show(ws["run_id"])
        # It ran on node B (a code run needs a container engine: only B has one).
        assert task.state == "succeeded" and task.node == ray_cluster.node_b
        [shipped] = [e for e in daemon.client.logs(task.id) if e.event == "workspace_shipped"]
        assert shipped.data["node"] == ray_cluster.node_b and shipped.data["bytes"] > 0

        # What left the head: the archive's members, as the relay logged them.
        log = daemon.log.read_text(errors="replace")
        [line] = [x for x in log.splitlines() if f"workspace {ws['id']} ships as" in x]
        names = line.split(": ", 1)[1]
        assert "'tree/calc.py'" in names and "'repo.bundle'" in names, line
        assert ".env" not in names and "never-leaves" not in log
        # ...and the node's copy is gone once the change came back.
        node_code = Path(ray_cluster.data_dir).parent / "state" / "code"
        assert not (node_code / ws["id"]).exists()

        assert tree_hashes(project) == before  # nothing touched the project yet
        applied = jarvis("code", "apply", ws["id"])
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert (project / "calc.py").read_text() == FIXED
        assert (project / ".env").read_text() == "API_KEY=never-leaves-the-head\n"
    finally:
        daemon.terminate()
