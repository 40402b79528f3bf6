"""An external agent as a daemon task (the scripted ACP agent, on the host): its tool
calls, plan and permission answers in `task logs`, cancel, and kill -9 recovery that
marks the run as not resumable (its state lived in the agent's process)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from jarvisd._errors import UsageError
from jarvisd.cli import cli
from jarvisd.daemon._protocol import TaskInfo
from jarvisd.runs import AgentSpec

from .conftest import DaemonProcess
from .test_daemon import events_of


def _agents(*scenarios: str) -> str:
    lines = []
    for scenario in scenarios:
        command = f'["{sys.executable}", "-m", "jarvisd.testing.acp_agent", "{scenario}"]'
        lines.append(f"[agents.external.{scenario}]\ncommand = {command}\n")
    return "".join(lines)


def _spec(scenario: str, workspace: Path) -> AgentSpec:
    return AgentSpec(
        input="go", agent=scenario, isolation="host", options={"workspace": str(workspace)}
    )


def _fake_agents() -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or ())
        # Not the reaper a host agent runs under (its argv ends with the agent's).
        if "jarvisd.testing.acp_agent" in line and "PR_SET_CHILD_SUBREAPER" not in line:
            found.append(proc.pid)
    return found


def test_events_reach_task_logs(jarvisd: DaemonProcess, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("MARKER-1\n")
    jarvisd.write_config("max_concurrent = 2", _agents("work"))
    jarvisd.start()
    c = jarvisd.client
    info = c.submit(_spec("work", tmp_path))
    done = c.wait(info.id, timeout=60)
    assert done.state == "succeeded", (done, jarvisd.log_text())
    assert done.result is not None
    assert done.result["answer"] == "read: MARKER-1; edit: allowed"  # after its last tool call
    kinds = [k for k, _ in events_of(c, info.id)]
    for kind in ("tool_call_start", "tool_call_end", "agent_plan", "permission"):
        assert kind in kinds, kinds


def test_cancel_and_kill9_recovery(jarvisd: DaemonProcess, tmp_path: Path) -> None:
    jarvisd.write_config("max_concurrent = 2", _agents("hang"))
    jarvisd.start()
    c = jarvisd.client
    cancelled = c.submit(_spec("hang", tmp_path))
    crashed = c.submit(_spec("hang", tmp_path))
    jarvisd.wait_for(
        lambda: c.show(cancelled.id).state == "running" and c.show(crashed.id).state == "running"
        and len(_fake_agents()) == 2, timeout=60, what="both agents running",
    )  # fmt: skip
    # Prompted (its checkpoint says it cannot be resumed): a crash before its session
    # was open would restart it from nothing.
    jarvisd.wait_for(lambda: c.show(crashed.id).checkpoint_turns > 0, what="its prompt")
    assert c.cancel(cancelled.id).state == "cancelled"
    jarvisd.wait_for(lambda: len(_fake_agents()) == 1, what="the cancelled agent gone")
    jarvisd.kill9()
    jarvisd.start()
    final = c.wait(crashed.id, timeout=30)
    assert final.state == "interrupted", final
    assert "cannot be resumed" in (final.reason or ""), final.reason
    deadline = time.monotonic() + 10
    while _fake_agents() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _fake_agents() == []


def _ask_for_edits(jarvisd: DaemonProcess, timeout: float = 600) -> None:
    jarvisd.write_config(
        "max_concurrent = 2",
        _agents("work") + f'[agents]\napproval_timeout = {timeout}\n'
        '[agents.permissions]\nedit = "ask"\n',
    )  # fmt: skip
    jarvisd.start()


def _waiting(jarvisd: DaemonProcess, task_id: str) -> TaskInfo:
    jarvisd.wait_for(lambda: jarvisd.client.show(task_id).waiting is not None, timeout=60,
                     what="the task waiting for approval")  # fmt: skip
    return jarvisd.client.show(task_id)


def test_approve_lets_the_waiting_tool_run(jarvisd: DaemonProcess, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("MARKER-1\n")
    _ask_for_edits(jarvisd)
    c = jarvisd.client
    info = c.submit(_spec("work", tmp_path))
    waiting = _waiting(jarvisd, info.id)
    assert waiting.state == "running" and waiting.waiting is not None
    assert (waiting.waiting.tool, waiting.waiting.kind) == ("write out.txt", "edit")
    assert not (tmp_path / "out.txt").exists()  # nothing runs before the answer
    listed = {t.id: t for t in c.list_tasks()}
    assert listed[info.id].waiting == waiting.waiting
    shown = CliRunner().invoke(cli, ["task", "show", info.id])
    assert "state:     waiting" in shown.output, shown.output
    assert "for approval of write out.txt (kind edit)" in shown.output, shown.output
    logs = CliRunner().invoke(cli, ["task", "logs", info.id])
    assert "waiting for approval: write out.txt (kind edit)" in logs.output, logs.output

    approved = CliRunner().invoke(cli, ["task", "approve", info.id])
    assert approved.exit_code == 0, approved.output
    done = c.wait(info.id, timeout=60)
    assert done.state == "succeeded", (done, jarvisd.log_text())
    assert done.waiting is None
    assert done.result is not None and done.result["answer"].endswith("edit: allowed")
    assert (tmp_path / "out.txt").read_text() == "written by the agent\n"
    answers = [d for k, d in events_of(c, info.id) if k == "approval"]
    assert answers == [{"tool": "write out.txt", "kind": "edit", "allowed": True,
                        "by": "approved by the user"}]  # fmt: skip
    with pytest.raises(UsageError, match="not waiting for approval"):
        c.answer(info.id, True)


def test_deny_keeps_the_tool_from_running(jarvisd: DaemonProcess, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("MARKER-1\n")
    _ask_for_edits(jarvisd)
    c = jarvisd.client
    info = c.submit(_spec("work", tmp_path))
    _waiting(jarvisd, info.id)
    denied = CliRunner().invoke(cli, ["task", "deny", info.id])
    assert denied.exit_code == 0, denied.output
    done = c.wait(info.id, timeout=60)
    assert done.state == "succeeded", (done, jarvisd.log_text())
    assert done.result is not None and done.result["answer"].endswith("edit: denied")
    assert not (tmp_path / "out.txt").exists()
    permission = [d for k, d in events_of(c, info.id) if k == "permission"]
    assert [p["allowed"] for p in permission] == [False]


def test_unanswered_request_is_denied_at_the_timeout(
    jarvisd: DaemonProcess, tmp_path: Path
) -> None:
    (tmp_path / "README.md").write_text("MARKER-1\n")
    _ask_for_edits(jarvisd, timeout=0.5)
    c = jarvisd.client
    info = c.submit(_spec("work", tmp_path))
    done = c.wait(info.id, timeout=60)
    assert done.state == "succeeded", (done, jarvisd.log_text())
    assert done.result is not None and done.result["answer"].endswith("edit: denied")
    assert not (tmp_path / "out.txt").exists()
    answers = [d for k, d in events_of(c, info.id) if k == "approval"]
    assert [(a["allowed"], a["by"]) for a in answers] == [(False, "no answer within 0.5 s")]


def test_cancel_while_waiting_ends_the_task(jarvisd: DaemonProcess, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("MARKER-1\n")
    _ask_for_edits(jarvisd)
    c = jarvisd.client
    info = c.submit(_spec("work", tmp_path))
    _waiting(jarvisd, info.id)
    assert c.cancel(info.id).state == "cancelled"
    assert not (tmp_path / "out.txt").exists()
    with pytest.raises(UsageError, match="not waiting for approval"):
        c.answer(info.id, False)


def test_a_waiting_approval_releases_its_slot_and_takes_it_back_when_answered(
    jarvisd: DaemonProcess, tmp_path: Path
) -> None:
    # One slot: a task waiting for a person must not keep the others queued, and its
    # answer must wait for the slot to be free again.
    (tmp_path / "README.md").write_text("MARKER-1\n")
    jarvisd.write_config(
        "max_concurrent = 1",
        _agents("work", "hang") + '[agents]\napproval_timeout = 600\n'
        '[agents.permissions]\nedit = "ask"\n',
    )  # fmt: skip
    jarvisd.start()
    c = jarvisd.client
    asking = c.submit(_spec("work", tmp_path))
    _waiting(jarvisd, asking.id)
    plain = c.submit(AgentSpec(input="hello"))
    done = c.wait(plain.id, timeout=60)
    assert done.state == "succeeded", (done, c.show(asking.id))
    assert c.show(asking.id).waiting is not None  # it still waits, unanswered
    # Another task takes the free slot; the answer then waits for it.
    holder = c.submit(_spec("hang", tmp_path))
    jarvisd.wait_for(lambda: c.show(holder.id).state == "running", timeout=60, what="holder")
    assert CliRunner().invoke(cli, ["task", "approve", asking.id]).exit_code == 0
    time.sleep(2)
    assert not (tmp_path / "out.txt").exists(), "the approved task ran without a slot"
    assert c.show(asking.id).state == "running"
    c.cancel(holder.id)
    finished = c.wait(asking.id, timeout=60)
    assert finished.state == "succeeded", (finished, jarvisd.log_text())
    assert (tmp_path / "out.txt").read_text() == "written by the agent\n"
