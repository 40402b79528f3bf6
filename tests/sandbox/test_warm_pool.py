"""The warm pool (``sandbox.warm_pool``) on a real engine: a session's first cell takes
a pre-created container, each pooled container serves one run and is removed after it,
and pooled containers are swept like orphans when their process is gone."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from jarvisd._config import Config, SandboxConfig
from jarvisd.agents._repl import ReplSession
from jarvisd.sandbox import DockerExecutor, connect, sweep_orphans
from jarvisd.sandbox._pool import POOL_LABEL, close_pools

from .test_escape import our_containers

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("engine")]


@pytest.fixture(autouse=True)
def no_pools_left() -> Iterator[None]:
    yield
    close_pools()
    assert not our_containers()


def pooled(size: int = 1) -> DockerExecutor:
    return DockerExecutor(Config(sandbox=SandboxConfig(warm_pool=size, memory="256m")))


def wait_ready(executor: DockerExecutor, count: int) -> list[str]:
    pool = executor.pool()
    assert pool is not None
    for _ in range(300):  # the engine creates them in the background
        if len(pool.ready()) >= count:
            break
        time.sleep(0.1)
    return pool.ready()


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


def test_a_pooled_container_serves_one_run_and_is_removed_after_it() -> None:
    executor = pooled()

    async def session_on(expected: str) -> str:
        repl = ReplSession(executor, exec_timeout=30, session_timeout=120)
        await repl.prepare()
        try:
            result = await repl.execute("import os\nx = 1\nos.path.exists('/tmp/used')")
            await repl.execute("open('/tmp/used', 'w').write('by a run')")
            assert repl.channel is not None
            taken = getattr(repl.channel, "id", "")
            assert taken == expected  # the first cell ran in the pooled container
            assert result.stdout.strip() == "False"  # a fresh one: no earlier run's files
            return taken
        finally:
            await repl.close()

    asyncio.run(ReplSession(executor, exec_timeout=5, session_timeout=60).prepare())
    first = wait_ready(executor, 1)
    assert len(first) == 1
    assert asyncio.run(session_on(first[0])) == first[0]
    assert not exists(first[0])  # removed at the end of its run
    second = wait_ready(executor, 1)
    assert second and second[0] != first[0]  # never handed out again
    assert asyncio.run(session_on(second[0])) == second[0]
    assert not exists(second[0])
    labels = [c.get("Labels") or {} for c in our_containers()]
    assert labels and all(label.get(POOL_LABEL) == "1" for label in labels)  # the refill


def test_requests_with_files_or_mounts_never_take_a_pooled_container() -> None:
    from jarvisd.executors import ExecRequest, run_to_completion

    executor = pooled()
    asyncio.run(ReplSession(executor, exec_timeout=5, session_timeout=60).prepare())
    ready = wait_ready(executor, 1)
    request = ExecRequest(argv=["python3", "main.py"], files={"main.py": "print('own')"})
    result = asyncio.run(run_to_completion(executor, request))
    assert result.stdout.strip() == "own"
    assert wait_ready(executor, 1) == ready and exists(ready[0])


def test_pooled_containers_are_swept_when_their_process_is_gone() -> None:
    # A process fills its pool and dies without cleaning up (no atexit: os._exit).
    program = (
        "import asyncio, os, time\n"
        "from jarvisd._config import Config, SandboxConfig\n"
        "from jarvisd.agents._repl import ReplSession\n"
        "from jarvisd.sandbox import DockerExecutor\n"
        "ex = DockerExecutor(Config(sandbox=SandboxConfig(warm_pool=2)))\n"
        "asyncio.run(ReplSession(ex, exec_timeout=5, session_timeout=60).prepare())\n"
        "while len(ex.pool().ready()) < 2: time.sleep(0.1)\n"
        "print(' '.join(ex.pool().ready()), flush=True)\n"
        "os._exit(0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    left = done.stdout.split()
    assert len(left) == 2 and all(exists(c) for c in left)
    removed = sweep_orphans(Config())
    assert set(left) <= set(removed)
    assert not any(exists(c) for c in left)
