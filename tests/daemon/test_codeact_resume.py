"""Sandboxed CodeAct tasks resumed after kill -9 of jarvisd (issue 36), against a real
jarvisd on a real socket and a real Docker sandbox.

Thirty CodeAct tasks (``--sandbox``, each with its own directory mounted read-write)
run on a scripted model behind a real Ollama-protocol server; each generation takes a
while, as a real model's does, so most of a task's time is inference. Each of the two
cells writes a file and appends a line to the task's ``cells.log``: a cell run twice
shows there. jarvisd is killed with SIGKILL at two seeded random moments (the seed is
printed) and started again, until every task has settled. Then: at least 95% have
succeeded with the workspace an uninterrupted run leaves, no cell ran twice, the rest
are ``interrupted`` with a reason, and no worker process or sandbox container is left.

A canary task, whose model never answers, runs through both kills and a third one once
the others have settled: a task the daemon died under three times is ``interrupted``.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from jarvisd._messages import Generation, Message, Role
from jarvisd.daemon import TaskInfo
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import AgentSpec
from tests.conftest import link_real_models, require
from tests.sandbox.conftest import engine_problem

from .conftest import DaemonProcess, owned_by, scripted_daemon, still_alive

pytestmark = [pytest.mark.slow, pytest.mark.docker]

TASKS = int(os.environ.get("JARVIS_TEST_RESUME_TASKS", "30"))
#: Seconds each generation takes: most of a task's time, as with a real model.
THINK_S = 2.0
#: Two: a task the daemon died under three times is not resumed (the canary shows it).
KILLS = 2
CANARY = "canary: never answered"
_TASK = re.compile(r"task (\d+) in (\S+?):")


def cell(number: int, workspace: str, n: int) -> str:
    # Self-contained: after a restart the session's variables are gone.
    letter = "AB"[number - 1]
    return (
        "import os\n"
        f"d = {workspace!r}\n"
        f"open(os.path.join(d, 'cells.log'), 'a').write('cell {number}\\n')\n"
        f"open(os.path.join(d, '{letter.lower()}.txt'), 'w').write('{letter}{n}')\n"
        f"print('cell {number} of task {n}')"
    )


def expected(n: int) -> dict[str, str]:
    """The workspace an uninterrupted run of task ``n``'s script leaves."""
    return {"a.txt": f"A{n}", "b.txt": f"B{n}", "cells.log": "cell 1\ncell 2\n"}


def _asked_after_resuming(events: Iterable[Any]) -> bool:
    """Whether the task asked its model anything after it last resumed."""
    kinds = [e.event for e in events]
    if "task_resumed" not in kinds:
        return False
    last = len(kinds) - 1 - kinds[::-1].index("task_resumed")
    return "inference_start" in kinds[last:]


class TwoCells(ScriptedEngine):
    """CodeAct, per task: two cells, then the answer, each after THINK_S. Records the
    restart notes it was shown."""

    def __init__(self) -> None:
        super().__init__()
        self.told: set[int] = set()

    async def generate(self, messages: Sequence[Message], **kwargs: Any) -> Generation:
        if any(CANARY in m.content for m in messages):
            await asyncio.sleep(3600)  # killed long before, with its daemon
        first = next(m.content for m in messages if m.role is Role.USER)
        found = _TASK.search(first)
        assert found is not None, first
        n, workspace = int(found.group(1)), found.group(2)
        # Not in lockstep: as with a real model, replies take longer or shorter.
        await asyncio.sleep(THINK_S * (0.75 + 0.125 * (n % 5)))
        if any("NEW session" in m.content for m in messages):
            self.told.add(n)
        done = sum(m.role is Role.USER and m.content.startswith("Observation") for m in messages)
        if done >= 2:
            return reply(f"Final Answer: task {n} done")
        return reply(f"```python\n{cell(done + 1, workspace, n)}\n```")


@pytest.fixture
def scripted() -> TwoCells:
    return TwoCells()


@pytest.fixture
def sandboxed(isolated_dirs: Path, scripted: TwoCells) -> Iterator[DaemonProcess]:
    root = isolated_dirs / "workspaces"
    root.mkdir()
    sandbox = f'[sandbox]\nbackend = "docker"\nmemory = "256m"\nallowed_roots = ["{root}:rw"]\n'
    with scripted_daemon(
        isolated_dirs, scripted, "max_concurrent = 8", sandbox, start=False
    ) as daemon:
        yield daemon


def workspace_of(path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(path.iterdir())}


def test_sandboxed_codeact_tasks_resume_after_kill_9(
    sandboxed: DaemonProcess, scripted: TwoCells, isolated_dirs: Path
) -> None:
    seed = int(os.environ.get("JARVIS_TEST_SEED") or random.randrange(1 << 30))
    print(f"kill -9 seed: {seed} (JARVIS_TEST_SEED={seed} repeats it)")
    rng = random.Random(seed)
    root = isolated_dirs / "workspaces"
    daemon = sandboxed.start()
    pids: set[int] = set()
    assert daemon.proc is not None
    pids.add(daemon.proc.pid)
    canary = daemon.client.submit(
        AgentSpec(input=CANARY, agent="native_openhands", isolation="sandbox")
    ).id
    ids: dict[str, int] = {}
    for n in range(TASKS):
        ws = root / f"t{n:02d}"
        ws.mkdir()
        ws.chmod(0o777)  # the sandbox user (10001 when tests run as root) writes there
        spec = AgentSpec(
            input=f"task {n} in {ws}: write the two files",
            agent="native_openhands",
            isolation="sandbox",
            mounts=(f"{ws}:rw",),
        )
        ids[daemon.client.submit(spec).id] = n
    started = time.monotonic()

    def kill_and_restart(what: str) -> None:
        running = len(daemon.client.list_tasks(("running",)))
        print(f"{what} at {time.monotonic() - started:.1f} s: {running} running")
        daemon.kill9()
        daemon.start()
        assert daemon.proc is not None
        pids.add(daemon.proc.pid)

    seen: dict[str, int] = {}  # checkpoints each task had at the last kill

    def progressed() -> bool:
        running = daemon.client.list_tasks(("running",))
        return any(t.checkpoint_turns > seen.get(t.id, 0) for t in running if t.id != canary)

    for kill in range(KILLS):
        # A random moment once some task has gone on since the last kill (a turn done,
        # so that it resumes from a checkpoint): in a generation, a cell, or between.
        daemon.wait_for(progressed, 300, "a task to complete a turn")
        time.sleep(rng.uniform(0, 2 * THINK_S))
        seen = {t.id: t.checkpoint_turns for t in daemon.client.list_tasks()}
        kill_and_restart(f"kill {kill + 1}")
    infos: dict[str, TaskInfo] = {}
    for task_id in ids:
        infos[task_id] = daemon.client.wait(task_id, timeout=600)
    print(f"all settled {time.monotonic() - started:.1f} s after the first submit")
    # The canary ran through both kills; the third is one too many.
    daemon.wait_for(
        lambda: daemon.client.show(canary).state == "running", 120, "the canary to run again"
    )
    kill_and_restart("kill 3 (the canary)")
    ended = daemon.client.wait(canary, timeout=60)
    assert ended.state == "interrupted", (ended.state, ended.reason)
    assert "the daemon died 3 times while it ran" in ended.reason
    states = {task_id: info.state for task_id, info in infos.items()}
    if os.environ.get("JARVIS_TEST_DEBUG"):
        for e in daemon.client.logs(next(iter(ids))):
            print(e.seq, round(e.timestamp - started, 2), e.event, str(e.data)[:100])
    # Each task resumed after a kill, with the turn it resumed from.
    resumed: dict[int, int] = {}
    for task_id, n in ids.items():
        for e in daemon.client.logs(task_id):
            if e.event == "task_resumed":
                resumed[n] = max(resumed.get(n, 0), int(e.data.get("from_turn") or 0))
    workers = {
        int(e.data["worker_pid"])
        for task_id in [*ids, canary]
        for e in daemon.client.logs(task_id)
        if e.event == "task_start" and e.data.get("worker_pid")
    }
    succeeded = [t for t, s in states.items() if s == "succeeded"]
    print(f"{len(succeeded)}/{TASKS} succeeded, {len(resumed)} resumed after a kill")
    for task_id, info in infos.items():
        if info.state != "succeeded":
            print(f"task {ids[task_id]}: {info.state}: {info.reason}")
    for task_id, info in infos.items():
        n = ids[task_id]
        cells = root / f"t{n:02d}" / "cells.log"
        log = cells.read_text() if cells.exists() else ""
        # No cell ran twice, whatever the task's end.
        assert sorted(set(log.splitlines())) == sorted(log.splitlines()), (n, log)
        if info.state == "succeeded":
            assert workspace_of(root / f"t{n:02d}") == expected(n), (
                n,
                info.result and info.result.get("tool_results"),
            )
        else:
            assert info.state == "interrupted" and info.reason, (n, info.state, info.reason)
    assert len(succeeded) >= math.ceil(0.95 * TASKS), states
    # The kills hit running tasks; those that went on from a checkpoint (a turn done)
    # were told that their session was new.
    from_checkpoint = {n for n, turn in resumed.items() if turn > 0}
    assert from_checkpoint, resumed
    # A task killed between its last checkpoint (its answer in it) and its end resumes
    # and ends without asking the model again: it has nobody to tell.
    asked_again = {ids[t] for t in ids if _asked_after_resuming(daemon.client.logs(t))}
    told_or_not_done = scripted.told | {ids[t] for t in ids if states[t] != "succeeded"}
    assert from_checkpoint & asked_again <= told_or_not_done, (from_checkpoint, asked_again)
    # No worker process and no sandbox container is left behind.
    daemon.terminate()
    assert still_alive(sorted(workers), within=30) == []
    deadline = time.monotonic() + 60
    while (left := owned_by(workers | pids)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == []


@pytest.mark.model
def test_a_sandboxed_codeact_task_on_the_real_model_resumes_after_kill_9(
    isolated_dirs: Path,
) -> None:
    # The same path on the real engine (qwen2.5-coder-0.5b in the task's worker): one
    # task, killed once its first turn (a cell) is done. It goes on from that
    # checkpoint (or, with a cell in flight, is interrupted with the reason); no call
    # runs twice; nothing is left behind.
    problem = engine_problem()
    require(not problem, problem)
    link_real_models("qwen2.5-coder-0.5b")
    ws = isolated_dirs / "workspace"
    ws.mkdir()
    ws.chmod(0o777)
    daemon = DaemonProcess(isolated_dirs, "http://127.0.0.1:9")
    daemon.config_file.write_text(
        '[engine]\ndefault = "llamacpp"\nmodel = "qwen2.5-coder-0.5b"\n'
        "[daemon]\nmax_concurrent = 1\n"
        f'[sandbox]\nbackend = "docker"\nmemory = "256m"\nallowed_roots = ["{ws}:rw"]\n'
    )
    daemon.start()
    pids = {daemon.proc.pid} if daemon.proc is not None else set()
    try:
        task = f"Write the text hello to the file {ws}/out.txt with Python."
        spec = AgentSpec(input=task, agent="native_openhands", isolation="sandbox",
                         mounts=(f"{ws}:rw",), temperature=0.0, max_tokens=256,
                         max_turns=4)  # fmt: skip
        task_id = daemon.client.submit(spec).id
        daemon.wait_for(
            lambda: daemon.client.show(task_id).checkpoint_turns > 0, 900, "a turn done"
        )
        daemon.kill9()
        daemon.start()
        assert daemon.proc is not None
        pids.add(daemon.proc.pid)
        info = daemon.client.wait(task_id, timeout=900)
        events = list(daemon.client.logs(task_id))
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.terminate()
    print(f"{info.state} {info.reason} {(info.result or {}).get('answer')!r}")
    assert info.state == "succeeded" or (info.state == "interrupted" and info.reason), info
    resumed = [e for e in events if e.event == "task_resumed"]
    assert resumed and int(resumed[0].data.get("from_turn") or 0) > 0, resumed
    started = [e.data for e in events if e.event == "tool_call_start"]
    print("cells:", [str(c.get("arguments"))[:200] for c in started])
    calls = [c["call_id"] for c in started]
    assert calls and len(calls) == len(set(calls))
    workers = {int(e.data["worker_pid"]) for e in events
               if e.event == "task_start" and e.data.get("worker_pid")}  # fmt: skip
    assert still_alive(sorted(workers), within=30) == []
    deadline = time.monotonic() + 60
    while (left := owned_by(workers | pids)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == []
