"""jarvisd keeps the warm pool (issue 36): started containers that its task workers
claim, each by one run, the pool refilled by the daemon, its idle containers removed
when the daemon stops, and a worker keeps no pool of its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from jarvisd.testing import OllamaStandIn
from tests.conftest import require
from tests.sandbox.conftest import engine_problem

from .conftest import DaemonProcess, owned_by
from .test_warm_pool_daemon import OneCell, cli, gone

pytestmark = [pytest.mark.slow, pytest.mark.docker]


@pytest.fixture
def kept(isolated_dirs: Path) -> Iterator[DaemonProcess]:
    problem = engine_problem()
    require(not problem, problem)
    with OllamaStandIn(OneCell()) as server:
        daemon = DaemonProcess(isolated_dirs, server.url)
        daemon.write_config(
            "max_concurrent = 2",
            '[sandbox]\nbackend = "docker"\nwarm_pool = 1\nmemory = "256m"\n',
        )
        yield daemon
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.terminate()


def running(container_id: str) -> bool:
    import docker.errors

    from jarvisd._config import Config
    from jarvisd.sandbox import connect

    client = connect(Config())
    try:
        return bool(client.api.inspect_container(container_id)["State"]["Running"])
    except docker.errors.NotFound:
        return False
    finally:
        client.close()


def pooled_by(daemon: DaemonProcess) -> list[str]:
    assert daemon.proc is not None
    return [c for c in owned_by({daemon.proc.pid}) if running(c)]


def test_task_workers_claim_the_daemons_started_containers(kept: DaemonProcess) -> None:
    kept.start()
    assert kept.proc is not None
    kept.wait_for(lambda: len(pooled_by(kept)) == 1, timeout=120, what="the pool filled")
    first = pooled_by(kept)
    time.sleep(1.0)  # nothing more is started: the pool holds its size
    assert pooled_by(kept) == first

    def run_task() -> int:
        done = cli("task", "submit", "--agent", "native_openhands", "work out 6*7")
        assert done.returncode == 0, done.stderr
        task_id = done.stdout.strip()
        waited = cli("task", "wait", task_id)
        assert waited.returncode == 0, (waited.stderr, kept.client.show(task_id), kept.log_text())
        logs = kept.client.logs(task_id)
        return next(int(e.data["worker_pid"]) for e in logs if e.event == "task_start")

    worker = run_task()
    # The task's run took the daemon's container (the worker removed it after its run)
    # and the daemon started the next one.
    assert not running(first[0])
    kept.wait_for(lambda: len(pooled_by(kept)) == 1, timeout=120, what="the pool refilled")
    second = pooled_by(kept)
    assert second != first
    gone({worker})
    assert owned_by({worker}) == []  # the worker kept no pool of its own
    worker = run_task()
    assert not running(second[0])
    # The daemon's stop removes what waits.
    kept.wait_for(lambda: len(pooled_by(kept)) == 1, timeout=120, what="the pool refilled")
    pid = kept.proc.pid
    kept.terminate()
    assert owned_by({pid}) == []
    assert not psutil.pid_exists(pid)
