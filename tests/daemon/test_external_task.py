"""An external agent as a daemon task (the scripted ACP agent, on the host): its tool
calls, plan and permission answers in `task logs`, cancel, and kill -9 recovery that
marks the run as not resumable (its state lived in the agent's process)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil

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
        input="go", agent=scenario, no_sandbox=True, options={"workspace": str(workspace)}
    )


def _fake_agents() -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if "jarvisd.testing.acp_agent" in " ".join(proc.info["cmdline"] or ()):
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
    assert done.result["answer"] == "Reading. read: MARKER-1; edit: allowed"
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
