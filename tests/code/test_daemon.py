"""jarvis code through a real jarvisd: the run is a task (its events in `task logs`),
and a daemon killed with -9 leaves the task interrupted and the workspace kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from jarvisd._messages import Generation, Message, Role, ToolSpec
from jarvisd.engines import ScriptedEngine, reply
from tests.daemon.conftest import DaemonProcess, SlowOnCue, scripted_daemon

from .conftest import FIXED, git, tree_hashes
from .test_run import TEST_COMMAND

pytestmark = pytest.mark.docker


def fixer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
    """CodeAct: first a block that fixes calc.py in the workspace the prompt names,
    then the summary."""
    prompt = next(m.content for m in messages if m.role is Role.USER)
    if "pretend" in prompt:  # claims a fix it never makes
        return reply("I changed the function add in calc.py to add its arguments.")
    if any(m.role is Role.ASSISTANT for m in messages):
        return reply("add adds now")
    where = prompt.split("in the directory ", 1)[1].split(" ", 1)[0]
    return reply(f"```python\nopen({where + '/calc.py'!r}, 'w').write({FIXED!r})\n```")


class SlowOnce(SlowOnCue):
    """Slow on cue until ``slow`` is cleared (the daemon is killed meanwhile)."""

    slow = True

    async def generate(self, messages: Sequence[Message], **kwargs: Any) -> Generation:
        if not self.slow:
            return await ScriptedEngine.generate(self, messages, **kwargs)
        return await super().generate(messages, **kwargs)


@pytest.fixture
def engine() -> ScriptedEngine:
    return SlowOnce(fallback=fixer)


@pytest.fixture
def jarvisd(isolated_dirs: Path, engine: ScriptedEngine) -> Iterator[DaemonProcess]:
    with scripted_daemon(isolated_dirs, engine, "max_concurrent = 2") as daemon:
        yield daemon


def jarvis(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvisd", *args], capture_output=True,
                          text=True, timeout=300, env=os.environ.copy())  # fmt: skip


def test_code_runs_as_a_daemon_task(jarvisd: DaemonProcess, project: Path) -> None:
    before = tree_hashes(project)
    done = jarvis("code", str(project), "fix the failing test", "--test", TEST_COMMAND)
    assert done.returncode == 0, done.stderr
    assert "running as jarvisd task" in done.stderr
    assert "+    return a + b" in done.stdout and "test after:  passed" in done.stdout
    (ws,) = json.loads(jarvis("code", "list", "--json").stdout)
    assert ws["state"] == "done" and ws["run_id"]
    task = jarvisd.client.show(ws["run_id"])
    assert task.state == "succeeded"
    assert task.result is not None and task.result["metadata"]["code"]["workspace"] == ws["id"]
    events = [e.event for e in jarvisd.client.logs(ws["run_id"])]
    assert "tool_call_start" in events and events[-1] == "task_end"
    assert tree_hashes(project) == before
    assert jarvis("code", "apply", ws["id"]).returncode == 0
    assert (project / "calc.py").read_text() == FIXED


@pytest.mark.parametrize("stop", ["kill -9", "SIGTERM"])
def test_a_daemon_stopped_mid_run_resumes_the_run_on_its_workspace(
    jarvisd: DaemonProcess, engine: ScriptedEngine, project: Path, stop: str
) -> None:
    """Issue 36 (it was left interrupted): the task resumes from its phase, and the
    agent of the round that was running is told that it was interrupted."""
    cli = subprocess.Popen([sys.executable, "-m", "jarvisd", "code", str(project), "slow task"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        jarvisd.wait_for(lambda: bool(engine.calls), 60, "the agent's first inference")
        (task,) = jarvisd.client.list_tasks(("running",))
        assert isinstance(engine, SlowOnce)
        engine.slow = False
        if stop == "kill -9":
            jarvisd.kill9()
        else:
            assert jarvisd.terminate() == 0
        jarvisd.start()
        info = jarvisd.client.wait(task.id, 120)
        assert info.state == "succeeded", info.reason
    finally:
        cli.kill()
        cli.communicate(timeout=10)
    assert "task_resumed" in [e.event for e in jarvisd.client.logs(task.id)]
    resumed = engine.calls[-1].messages
    assert any("this run was interrupted" in m.content for m in resumed if m.role is Role.USER)
    (listed,) = json.loads(jarvis("code", "list", "--json").stdout)
    ws = json.loads(jarvis("code", "show", listed["id"], "--json").stdout)
    assert ws["state"] == "done" and ws["progress"]["resumed"] == 1
    assert "+    return a + b" in ws["outcome"]["diff"]
    assert jarvis("code", "discard", ws["id"]).returncode == 0
    assert git(project, "branch", "--list", "jarvis/*") == ""


def test_a_claimed_fix_with_no_change_and_tests_that_cannot_run_through_the_daemon(
    jarvisd: DaemonProcess, project: Path
) -> None:
    """The issue's run as a daemon task: the test command cannot run (the image has no
    pytest) and the agent claims a change it never made. `done` and exit 0 it was."""
    done = jarvis("code", str(project), "pretend to fix add", "--test", "python3 -m pytest -q")
    assert done.returncode == 1, done.stderr
    assert "jarvis: error: no_change: the agent's summary claims a change" in done.stderr
    assert "test before: test_error: No module named pytest" in done.stdout
    assert "no change, though the summary claims one" in done.stdout
    (ws,) = json.loads(jarvis("code", "list", "--json").stdout)
    assert ws["state"] == "failed" and ws["outcome"]["failure"]["code"] == "no_change"
    assert ws["outcome"]["test_after"]["verdict"] == "test_error"
    assert jarvisd.client.show(ws["run_id"]).state == "failed"


def test_candidates_run_as_one_daemon_task(jarvisd: DaemonProcess, project: Path) -> None:
    done = jarvis("code", str(project), "fix the failing test", "--test", TEST_COMMAND,
                  "--candidates", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("running as jarvisd task") == 1
    assert "candidate=1" in done.stderr and "candidate=2" in done.stderr  # round events
    assert "candidates of" in done.stdout and "test after:  passed" in done.stdout
    listed = json.loads(jarvis("code", "list", "--json").stdout)
    assert sorted(ws["candidate"] for ws in listed) == [1, 2]
    assert {ws["state"] for ws in listed} == {"done"}
    lead = next(ws for ws in listed if ws["candidate"] == 1)
    assert jarvis("code", "apply", lead["id"]).returncode == 0
    assert (project / "calc.py").read_text() == FIXED


def test_the_shutdown_reason_is_the_daemons() -> None:
    from jarvisd.code._resume import SHUTDOWN_REASON
    from jarvisd.daemon._taskrun import SHUTDOWN_REASON as DAEMONS

    assert SHUTDOWN_REASON == DAEMONS
