"""`jarvis task submit --team`: the spec carries the team's text to the daemon, which
runs the team like any agent, with its pattern events in the task's log."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import DaemonProcess
from .test_daemon import _jarvis

TEAM = """\
root = "both"

[agents.a]
agent = "simple"

[agents.b]
agent = "simple"

[patterns.both]
pattern = "parallel"
members = ["a", "b"]
"""


def test_task_submit_team(jarvisd: DaemonProcess, tmp_path: Path) -> None:
    path = tmp_path / "team.toml"
    path.write_text(TEAM)
    jarvisd.start()
    submitted = _jarvis("task", "submit", "--team", str(path), "hello")
    assert submitted.returncode == 0, submitted.stderr
    task_id = submitted.stdout.strip()
    path.unlink()  # the daemon never reads the file: the text travelled in the spec
    waited = _jarvis("task", "wait", task_id)
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout == "## a\nanswer to hello\n\n## b\nanswer to hello\n"
    shown = json.loads(_jarvis("task", "show", task_id, "--json").stdout)
    assert shown["state"] == "succeeded"
    logs = _jarvis("task", "logs", task_id).stdout
    assert "both" in logs and "member" in logs, logs


def test_a_synthesizer_without_its_mode_is_refused_at_submit_with_the_line(
    jarvisd: DaemonProcess, tmp_path: Path
) -> None:
    path = tmp_path / "team.toml"
    path.write_text(TEAM + 'synthesizer = "a"\n')  # mode left out: "all"
    jarvisd.start()
    submitted = _jarvis("task", "submit", "--team", str(path), "hello")
    assert submitted.returncode != 0, submitted.stdout
    assert f"{path}:12: [patterns.both] synthesizer is used only with" in submitted.stderr
    assert jarvisd.client.list_tasks() == []  # nothing was queued
