"""The warm pool keeps started containers (issue 36): the REPL already imported and
waiting on stdin, taken by one run, never by two, removed after it, refilled in the
background, and an idle container holds nothing of any run."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from jarvisd._config import Config, SandboxConfig
from jarvisd.agents._repl import ReplSession
from jarvisd.sandbox import DockerExecutor, connect
from jarvisd.sandbox._pool import Pooled, close_pools

from .test_escape import our_containers

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("engine")]

#: What the first run leaves wherever it can: a file in /tmp, its environment, a
#: variable of its start frame (run-specific input, like an RLM's context).
MARK = "run-one-was-here-7f3a"


@pytest.fixture(autouse=True)
def no_pools_left() -> Iterator[None]:
    yield
    close_pools()
    assert not our_containers()


def pooled(size: int) -> DockerExecutor:
    return DockerExecutor(Config(sandbox=SandboxConfig(warm_pool=size, memory="256m")))


def session(executor: DockerExecutor, **kw: object) -> ReplSession:
    return ReplSession(executor, exec_timeout=30, session_timeout=120, **kw)  # type: ignore[arg-type]


def wait_ready(executor: DockerExecutor, count: int) -> list[str]:
    pool = executor.pool()
    assert pool is not None
    for _ in range(600):  # the engine starts them in the background
        if len(pool.ready()) >= count:
            break
        time.sleep(0.1)
    ready = pool.ready()
    assert len(ready) >= count, ready
    return ready


def state(container_id: str) -> dict[str, object]:
    import docker.errors

    client = connect(Config())
    try:
        return dict(client.api.inspect_container(container_id).get("State") or {})
    except docker.errors.NotFound:
        return {}
    finally:
        client.close()


LOOK = (
    "import os\n"
    "env = open('/proc/1/environ', 'rb').read().decode() + str(dict(os.environ))\n"
    "tmp = sorted(os.listdir('/tmp'))\n"
    "mounts = open('/proc/self/mountinfo').read()\n"
    f"print({MARK!r} in env, tmp, {MARK!r} in mounts, 'secret' in globals())"
)


def test_back_to_back_runs_on_a_pool_of_one_see_nothing_of_each_other() -> None:
    executor = pooled(1)
    os.environ["JARVIS_TEST_SECRET"] = MARK  # the host's secrets never reach a pooled one
    try:
        asyncio.run(session(executor).prepare())
        first = wait_ready(executor, 1)[0]
    finally:
        del os.environ["JARVIS_TEST_SECRET"]
    assert state(first).get("Running")  # warm: started before any run asked

    async def run_one() -> str:
        repl = session(executor, variables={"secret": MARK})
        try:
            await repl.execute(
                "import os\n"
                f"open('/tmp/{MARK}', 'w').write(secret)\n"
                f"os.environ['LEFT'] = {MARK!r}\n"
                f"os.putenv('LEFT', {MARK!r})"
            )
            assert repl.channel is not None
            return repl.channel.id  # type: ignore[attr-defined,no-any-return]
        finally:
            await repl.close()

    async def run_two() -> tuple[str, str]:
        repl = session(executor)
        try:
            result = await repl.execute(LOOK)
            assert repl.channel is not None
            return repl.channel.id, result.stdout.strip()  # type: ignore[attr-defined]
        finally:
            await repl.close()

    assert asyncio.run(run_one()) == first  # the first run took the pooled container
    assert not state(first)  # and it is gone with its run
    second = wait_ready(executor, 1)[0]  # the refill
    assert second != first
    assert state(second).get("Running")
    taken, seen = asyncio.run(run_two())
    assert taken == second
    assert seen == "False [] False False"


def test_a_pooled_container_is_never_handed_out_twice() -> None:
    executor = pooled(2)
    asyncio.run(session(executor).prepare())
    ready = set(wait_ready(executor, 2))

    async def one() -> tuple[str, str]:
        repl = session(executor)
        try:
            result = await repl.execute(
                f"import os\nseen = os.listdir('/tmp')\nopen('/tmp/{MARK}', 'w').close()\nseen"
            )
            assert repl.channel is not None
            return repl.channel.id, result.stdout.strip()  # type: ignore[attr-defined]
        finally:
            await repl.close()

    async def many() -> list[tuple[str, str]]:
        return await asyncio.gather(*(one() for _ in range(4)))

    runs = asyncio.run(many())
    ids = [cid for cid, _ in runs]
    assert len(set(ids)) == 4  # four runs, four containers
    assert ready <= set(ids)  # both pooled ones were used, once each
    assert all(seen == "[]" for _, seen in runs)  # none saw another's file

    # Takes from many threads at once: each ready id goes to one taker only.
    pool = executor.pool()
    assert pool is not None
    config = executor._configure(session(executor)._request(), (), (), None)
    ready = set(wait_ready(executor, 2))
    got: list[Pooled | None] = []
    barrier = threading.Barrier(6)

    def take() -> None:
        barrier.wait()
        got.append(pool.take(config))

    threads = [threading.Thread(target=take) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    handed = [p for p in got if p is not None]
    ids = [p.id for p in handed]
    assert len(ids) == len(set(ids)) and set(ids) <= ready
    pool._remove(handed)  # taken by the test: its to remove


def test_requests_with_an_environment_never_take_a_pooled_container() -> None:
    from jarvisd.executors import ExecRequest, run_to_completion

    executor = pooled(1)
    asyncio.run(session(executor).prepare())
    ready = wait_ready(executor, 1)
    request = ExecRequest(
        argv=["python3", "-c", "import os; print(os.environ['TOKEN'])"], env={"TOKEN": MARK}
    )
    asyncio.run(executor.prepare(request))  # no idle container is made with its secret
    pool = executor.pool()
    assert pool is not None and len(pool._configs) == 1
    result = asyncio.run(run_to_completion(executor, request))
    assert result.stdout.strip() == MARK
    assert wait_ready(executor, 1) == ready and state(ready[0]).get("Running")


def test_idle_pooled_containers_are_removed_when_their_process_exits() -> None:
    program = (
        "import asyncio, time\n"
        "from jarvisd._config import Config, SandboxConfig\n"
        "from jarvisd.agents._repl import ReplSession\n"
        "from jarvisd.sandbox import DockerExecutor\n"
        "ex = DockerExecutor(Config(sandbox=SandboxConfig(warm_pool=2)))\n"
        "asyncio.run(ReplSession(ex, exec_timeout=5, session_timeout=60).prepare())\n"
        "while len(ex.pool().ready()) < 2: time.sleep(0.1)\n"
        "print(' '.join(ex.pool().ready()), flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    left = done.stdout.split()
    assert len(left) == 2
    assert not any(state(c) for c in left)


def test_a_pooled_container_that_ended_while_idle_is_dropped_not_handed_out() -> None:
    executor = pooled(1)
    asyncio.run(session(executor).prepare())
    dead = wait_ready(executor, 1)[0]
    client = connect(Config())
    try:
        client.api.kill(dead)  # its program is gone (as after an engine hiccup or a kill)
        client.api.wait(dead, timeout=60)
        time.sleep(0.5)  # and its stream has ended
    finally:
        client.close()

    async def run() -> tuple[str, str]:
        repl = session(executor)
        try:
            result = await repl.execute("print(6 * 7)")
            assert repl.channel is not None
            return repl.channel.id, result.stdout.strip()  # type: ignore[attr-defined]
        finally:
            await repl.close()

    taken, out = asyncio.run(run())
    assert out == "42" and taken != dead
    assert not state(dead)  # removed, not left behind
