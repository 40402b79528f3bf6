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
    import asyncio, os, sys
    from jarvisd.executors import ExecRequest, SubprocessExecutor, run_to_completion
    from jarvisd.executors._launcher import drop_privileges
    launcher = drop_privileges()
    executor = SubprocessExecutor(launcher=launcher)
    request = ExecRequest(argv=["cat", "/proc/self/status"], timeout=20)
    child = asyncio.run(run_to_completion(executor, request))
    ids = [line.split()[1:4] for line in child.stdout.splitlines() if line[:4] in ("Uid:", "Gid:")]
    caps = [line.split()[1] for line in child.stdout.splitlines() if line[:6] in ("CapEff", "CapPrm")]
    print(os.getresuid(), ids, caps, child.exit_code)
""")


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.defpath, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, check=False
    )


def test_a_runner_started_as_root_keeps_no_root_id_and_its_code_runs_as_the_code_user() -> None:
    done = run({"JARVIS_PRIVSEP": "10001:10001:10002"})
    assert done.returncode == 0, done.stderr
    # The runner: 10001 throughout (no saved root uid: its launcher parent holds root);
    # its code, started by the launcher: 10002 throughout, no capability.
    assert done.stdout == (
        "(10001, 10001, 10001) [['10002', '10002', '10002'], ['10001', '10001', '10001']] "
        "['0000000000000000', '0000000000000000'] 0\n"
    )


@pytest.mark.parametrize("spec", ["", "10001:10001", "10001:10001:10001", "0:0:10002", "a:b:c"])
def test_a_runner_started_as_root_without_a_valid_plan_refuses_to_run(spec: str) -> None:
    done = run({"JARVIS_PRIVSEP": spec} if spec else {})
    assert done.returncode != 0 and "PrivsepError" in done.stderr


LEFTOVER = textwrap.dedent("""
    import asyncio, os, sys, time
    from jarvisd.executors import ExecRequest, SubprocessExecutor, run_to_completion
    from jarvisd.executors._launcher import drop_privileges
    launcher = drop_privileges()
    executor = SubprocessExecutor(launcher=launcher)
    def run(*argv):
        return asyncio.run(run_to_completion(executor, ExecRequest(argv=list(argv), timeout=20)))
    # A code process leaves a detached (setsid) sleeper behind and ends.
    left = run("sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
    pid = int(left.stdout)
    def alive():
        try:
            return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    deadline = time.monotonic() + 10
    while alive() and time.monotonic() < deadline:  # gone when its session was reaped
        time.sleep(0.05)
    print("after the session", alive())
""")


def test_a_process_code_leaves_behind_is_killed_when_its_session_ends() -> None:
    env = {"PATH": os.defpath, "PYTHONPATH": str(ROOT), "JARVIS_PRIVSEP": "10001:10001:10002"}
    done = subprocess.run(
        [sys.executable, "-c", LEFTOVER], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "after the session False\n"
