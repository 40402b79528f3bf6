"""``sandbox.warm_pool`` under a real jarvisd (issue 38, item 5): a task worker and an
ask worker leave through ``os._exit``, which skips ``atexit``; their pre-created
containers must still be removed when they end, not wait for the next daemon start."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

from jarvisd._messages import Generation, Message, Role
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.testing import OllamaStandIn
from tests.conftest import require
from tests.sandbox.conftest import engine_problem

from .conftest import DaemonProcess, owned_by

pytestmark = [pytest.mark.slow, pytest.mark.docker]


class OneCell(ScriptedEngine):
    """CodeAct: one cell, then the answer."""

    async def generate(self, messages: Sequence[Message], **kwargs: Any) -> Generation:
        if any(m.role is Role.TOOL for m in messages) or "42" in messages[-1].content:
            return reply("Final Answer: 42")
        return reply("```python\nprint(6 * 7)\n```")


def gone(pids: set[int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while any(psutil.pid_exists(p) for p in pids):
        assert time.monotonic() < deadline, f"processes {pids} did not end"
        time.sleep(0.1)


@pytest.fixture
def pooled(isolated_dirs: Path) -> Iterator[DaemonProcess]:
    problem = engine_problem()
    require(not problem, problem)
    with OllamaStandIn(OneCell()) as server:
        daemon = DaemonProcess(isolated_dirs, server.url)
        daemon.write_config(
            "max_concurrent = 2\nask_idle_unload = 2",
            '[sandbox]\nbackend = "docker"\nwarm_pool = 1\nmemory = "256m"\n',
        )
        yield daemon
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.terminate()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvisd", *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_workers_that_end_leave_no_warm_containers(pooled: DaemonProcess) -> None:
    pooled.start()
    assert pooled.proc is not None
    c = pooled.client
    ids = []
    for _ in range(2):
        done = cli("task", "submit", "--agent", "native_openhands", "work out 6*7")
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    for task_id in ids:
        waited = cli("task", "wait", task_id)
        assert waited.returncode == 0, (waited.stderr, c.show(task_id), pooled.log_text())
    workers = {int(e.data["worker_pid"]) for t in ids for e in c.logs(t) if e.event == "task_start"}
    assert len(workers) == 2
    gone(workers)
    assert owned_by(workers) == []
    # An ask worker's idle unload (ask_idle_unload = 2 s) leaves none either.
    asked = cli("ask", "--agent", "native_openhands", "work out 6*7")
    assert asked.returncode == 0 and "42" in asked.stdout, asked.stderr
    ask_workers = {p.pid for p in psutil.Process(pooled.proc.pid).children()
                   if "jarvisd.daemon._askworker" in " ".join(p.cmdline())}  # fmt: skip
    gone(ask_workers)
    assert owned_by(ask_workers) == []
