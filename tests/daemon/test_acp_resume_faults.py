"""ACP agents resumed with ``session/load`` after kill -9 of jarvisd (issue 36).

A real jarvisd runs 10 tasks of a scripted ACP agent (``jarvisd.testing.acp_steps``:
the real protocol, its sessions kept in its HOME, each step a tool call that appends a
line to the workspace's ``log.txt``) in the sandbox (Docker), and is killed with
SIGKILL at seeded random points, then restarted, until every task has settled. Then:

* at least 95% succeeded, each with the same workspace as an uninterrupted run of the
  same script (run first, on the same daemon);
* no step ran twice (``log.txt`` holds each line once) and no tool call is in a task's
  events twice;
* the rest are ``interrupted`` with a reason;
* no agent process, container or HOME is left behind.

An agent that does not advertise ``loadSession`` is still not resumed (as before).
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import psutil
import pytest

from jarvisd.daemon import Client
from jarvisd.daemon._protocol import TaskInfo
from jarvisd.runs import AgentSpec
from tests.conftest import require
from tests.sandbox.conftest import engine_problem

from .conftest import DaemonProcess
from .test_daemon import events_of

pytestmark = [pytest.mark.slow, pytest.mark.docker]

STEPS = 4
THINK_S = 0.8
TASKS = 10
SEED = 36
KILLS = 2


def _config(jarvisd: DaemonProcess, root: Path) -> None:
    argv = ["python3", "-m", "jarvisd.testing.acp_steps", str(STEPS), str(THINK_S)]
    command, no_load = json.dumps(argv), json.dumps([*argv, "--no-load"])
    jarvisd.write_config(
        f"max_concurrent = {TASKS}",
        f"[agents.external.steps]\ncommand = {command}\n"
        f"[agents.external.forgetful]\ncommand = {no_load}\n"
        f'[sandbox]\nbackend = "docker"\nmemory = "256m"\n'
        f'allowed_roots = ["{root}:rw"]\n',
    )


def _workspace(root: Path, name: str) -> Path:
    ws = root / name
    ws.mkdir()
    os.chmod(ws, 0o777)  # the sandbox user writes there
    return ws


def _spec(agent: str, ws: Path) -> AgentSpec:
    return AgentSpec(input="do the steps", agent=agent, options={"workspace": str(ws)})


def _content(ws: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(ws.iterdir())}


def _settled(jarvisd: DaemonProcess, ids: list[str]) -> bool:
    return all(jarvisd.client.show(i).finished for i in ids)


def _agents() -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if "jarvisd.testing.acp_steps" in " ".join(proc.info["cmdline"] or ()):
            found.append(proc.pid)
    return found


def _containers() -> list[str]:
    from jarvisd._config import Config
    from jarvisd.sandbox import connect
    from jarvisd.sandbox._policy import LABEL

    client = connect(Config())
    try:
        found = client.api.containers(all=True, filters={"label": f"{LABEL}=1"})
    finally:
        client.close()
    return [c["Id"] for c in found if "acp_forward" in " ".join(c.get("Command") or "")]


def _conversing(c: Client, task_id: str) -> bool:
    """Whether the task's current attempt has ended a tool call and not finished."""
    kinds = [k for k, _ in events_of(c, task_id)]
    if "task_end" in kinds or "task_start" not in kinds:
        return False
    last = len(kinds) - 1 - kinds[::-1].index("task_start")
    return "tool_call_end" in kinds[last:]


def _step_before_resume(c: Client, task_id: str) -> bool:
    kinds = [k for k, _ in events_of(c, task_id)]
    return "task_resumed" in kinds and "tool_call_end" in kinds[: kinds.index("task_resumed")]


def _homes(root: Path) -> list[str]:
    homes = root / "state" / "agent-homes"
    return sorted(os.listdir(homes)) if homes.is_dir() else []


def test_acp_tasks_resume_after_kill9(jarvisd: DaemonProcess, isolated_dirs: Path) -> None:
    problem = engine_problem()
    require(not problem, problem)
    root = isolated_dirs / "work"
    root.mkdir()
    _config(jarvisd, root)
    jarvisd.start()
    c = jarvisd.client
    before = set(_containers())

    # The reference: the same script, uninterrupted.
    reference_ws = _workspace(root, "reference")
    reference = c.wait(c.submit(_spec("steps", reference_ws)).id, timeout=180)
    assert reference.state == "succeeded", (reference, jarvisd.log_text())
    assert reference.result is not None and reference.result["answer"] == f"done: {STEPS} steps"
    expected = _content(reference_ws)
    assert expected["log.txt"] == "".join(f"step {i}\n" for i in range(STEPS))

    workspaces = [_workspace(root, f"ws{n}") for n in range(TASKS)]
    ids = [c.submit(_spec("steps", ws)).id for ws in workspaces]
    rng = random.Random(SEED)
    kills = 0
    # Two kills: a third one under the same task would end it as interrupted, by rule
    # (the daemon died three times while it ran).
    while not _settled(jarvisd, ids) and kills < KILLS:
        # At a random point while conversations are under way (containers take a
        # while to start on a loaded machine: a kill before that tests little).
        jarvisd.wait_for(
            lambda: sum(_conversing(c, i) for i in ids) >= 3 or _settled(jarvisd, ids),
            timeout=180,
            what="conversations under way",
        )
        time.sleep(rng.uniform(0.0, STEPS * THINK_S))
        jarvisd.kill9()
        kills += 1
        jarvisd.start()
    deadline = time.monotonic() + 300
    while not _settled(jarvisd, ids):
        assert time.monotonic() < deadline, ([c.show(i) for i in ids], jarvisd.log_text())
        time.sleep(0.2)

    finals: list[TaskInfo] = [c.show(i) for i in ids]
    resumed = [i for i in ids if any(k == "task_resumed" for k, _ in events_of(c, i))]
    # Resumed mid-conversation (a step done before the crash): session/load, not a
    # restart from nothing.
    loaded = [i for i in ids if _step_before_resume(c, i)]
    succeeded = [t for t in finals if t.state == "succeeded"]
    report = [(t.id, t.state, t.reason) for t in finals]
    print(
        f"kills={kills} resumed={len(resumed)} loaded={len(loaded)} succeeded={len(succeeded)}/{TASKS}: {report}"
    )
    assert kills == KILLS and resumed and loaded, report
    assert len(succeeded) >= 0.95 * TASKS, report
    for info, ws in zip(finals, workspaces, strict=True):
        lines = (ws / "log.txt").read_text().splitlines() if (ws / "log.txt").exists() else []
        assert len(lines) == len(set(lines)), (info.id, lines)  # no step ran twice
        starts = [d["call_id"] for k, d in events_of(c, info.id) if k == "tool_call_start"]
        assert len(starts) == len(set(starts)), (info.id, starts)
        if info.state == "succeeded":
            assert info.result is not None and info.result["answer"] == f"done: {STEPS} steps"
            assert _content(ws) == expected, info.id
        else:
            assert info.state == "interrupted" and info.reason, info
    # Nothing left: agents, their containers, their HOMEs.
    deadline = time.monotonic() + 60
    while (_agents() or set(_containers()) - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _agents() == []
    assert set(_containers()) <= before
    assert _homes(isolated_dirs) == []
    jarvisd.terminate()


def test_an_agent_without_load_session_is_not_resumed(
    jarvisd: DaemonProcess, isolated_dirs: Path
) -> None:
    problem = engine_problem()
    require(not problem, problem)
    root = isolated_dirs / "work"
    root.mkdir()
    _config(jarvisd, root)
    jarvisd.start()
    c = jarvisd.client
    ws = _workspace(root, "ws")
    info = c.submit(_spec("forgetful", ws))
    jarvisd.wait_for(
        lambda: any(k == "tool_call_end" for k, _ in events_of(c, info.id)),
        timeout=120,
        what="a step done",
    )
    jarvisd.kill9()
    jarvisd.start()
    final = c.wait(info.id, timeout=60)
    assert final.state == "interrupted", final
    assert "does not advertise loadSession" in (final.reason or ""), final.reason
    jarvisd.wait_for(lambda: not _agents() and _homes(isolated_dirs) == [], timeout=60,
                     what="its agent and HOME gone")  # fmt: skip
    jarvisd.terminate()
