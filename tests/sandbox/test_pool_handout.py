"""jarvisd's warm pool handed to other processes (``_handout``) on a real engine: claims
from several processes at once never get the same container, a container whose taker
died is removed, and the keeper's stop removes what still waits."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from jarvisd._config import Config, SandboxConfig
from jarvisd.agents._repl import ReplSession
from jarvisd.sandbox import DockerExecutor, connect
from jarvisd.sandbox._handout import PoolKeeper, handout_dir

from .test_escape import our_containers

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("engine")]

#: Claims once the go file exists (all claimers at once), prints what it got.
CLAIM = (
    "import sys, time\nfrom pathlib import Path\nfrom jarvisd.sandbox._handout import claim\n"
    "print('waiting', flush=True)\n"
    "while not Path(sys.argv[2]).exists(): time.sleep(0.005)\n"
    "print(claim(Path(sys.argv[1])) or '', flush=True)\n"
)


def exists(container_id: str) -> bool:
    import docker.errors

    client = connect(Config())
    try:
        client.api.inspect_container(container_id)
        return True
    except docker.errors.NotFound:
        return False
    finally:
        client.close()


def wait(predicate: object, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_claims_across_processes_and_a_dead_takers_container(tmp_path: Path) -> None:
    executor = DockerExecutor(Config(sandbox=SandboxConfig(warm_pool=2, memory="256m")))
    config = executor._configure(
        ReplSession(executor, exec_timeout=5, session_timeout=60)._request(), (), (), None
    )
    directory = handout_dir(executor.address, config)
    keeper = PoolKeeper(executor.client().api, config, directory, 2)
    keeper.start()
    try:
        wait(lambda: len(keeper.ready()) == 2, "the keeper to fill")
        ready = set(keeper.ready())
        # Four processes claim at once from two ready containers; each claimer then
        # dies without removing what it took (a worker killed before its run ended).
        go = tmp_path / "go"
        claimers = [
            subprocess.Popen(
                [sys.executable, "-c", CLAIM, str(directory), str(go)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        for claimer in claimers:
            assert claimer.stdout is not None and claimer.stdout.readline() == "waiting\n"
        go.touch()
        got = [p.communicate(timeout=120)[0].strip() for p in claimers]
        taken = [cid for cid in got if cid]
        assert len(taken) == len(set(taken))  # never one container to two processes
        assert ready <= set(taken)  # and both that waited went to someone
        # Their takers are gone: the keeper removes them, and refills.
        wait(lambda: not any(exists(c) for c in taken), "the dead takers' containers removed")
        wait(lambda: len(keeper.ready()) == 2, "the keeper to refill")
        waiting = keeper.ready()
        assert not set(waiting) & set(taken)
    finally:
        keeper.stop()
    assert not any(exists(c) for c in waiting)
    assert not our_containers()


def test_a_daemon_whose_engine_is_away_keeps_no_pool_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from jarvisd.daemon._warmpool import start_keeper

    missing = f"unix://{tmp_path}/no-engine.sock"
    config = Config(sandbox=SandboxConfig(warm_pool=1, backend="docker", docker_host=missing))
    assert start_keeper(config) is None
    assert "warm pool: not kept" in caplog.text and "no-engine.sock" in caplog.text
