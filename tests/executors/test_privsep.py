"""Privilege separation of a runner started as root (what the docker backend does for
the in-container agent runner): checked here in host processes, as root."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="starting as root needs root")

PROGRAM = textwrap.dedent("""
    import os, subprocess, sys
    from jarvisd.executors._privsep import become, drop_privileges
    user = drop_privileges()
    child = subprocess.run(["cat", "/proc/self/status"], preexec_fn=lambda: become(user),
                           capture_output=True, text=True, check=True)
    ids = [line.split()[1:4] for line in child.stdout.splitlines() if line[:4] in ("Uid:", "Gid:")]
    print(os.getresuid(), ids)
""")


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.defpath, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, check=False
    )


def test_a_runner_started_as_root_keeps_root_only_as_its_saved_uid() -> None:
    done = run({"JARVIS_PRIVSEP": "10001:10001:10002"})
    assert done.returncode == 0, done.stderr
    # The runner: real and effective 10001, saved 0; its child: 10002 throughout.
    assert done.stdout == (
        "(10001, 10001, 0) [['10002', '10002', '10002'], ['10001', '10001', '10001']]\n"
    )


@pytest.mark.parametrize("spec", ["", "10001:10001", "10001:10001:10001", "0:0:10002", "a:b:c"])
def test_a_runner_started_as_root_without_a_valid_plan_refuses_to_run(spec: str) -> None:
    done = run({"JARVIS_PRIVSEP": spec} if spec else {})
    assert done.returncode != 0 and "PrivsepError" in done.stderr
