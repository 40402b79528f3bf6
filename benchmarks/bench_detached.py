"""`jarvis ask --no-sandbox --max-wall 15` with an external agent whose detached
grandchild (a session of its own, holding the agent's stdout) sleeps 90 s: how long
the run takes, and whether the grandchild outlives it (issue 29). Before the reaper
the run waited for the grandchild (about 90 s) and left it running.

    python -m benchmarks.bench_detached     (or through benchmarks.harness)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import BenchEnv, Row

WALL = 15.0
SLEEP = 90.0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def measure(python: str, tmp: Path) -> tuple[float, bool]:
    """(seconds the run took, whether the grandchild was still alive 2 s after)."""
    from jarvisd.testing import acp_agent

    config_dir, workspace, pid_file = tmp / "cfg", tmp / "ws", tmp / "grandchild.pid"
    config_dir.mkdir(exist_ok=True)
    workspace.mkdir(exist_ok=True)
    agent = [python, acp_agent.__file__, "detach", str(pid_file), str(SLEEP)]
    (config_dir / "config.toml").write_text(f"[agents.external.d]\ncommand = {json.dumps(agent)}\n")
    argv = [python, "-m", "jarvisd", "ask", "--no-daemon", "--agent", "d", "--no-sandbox",
            "--max-wall", str(WALL), "--option", f"workspace={workspace}", "go"]  # fmt: skip
    env = {**os.environ, "JARVIS_CONFIG_DIR": str(config_dir)}
    start = time.monotonic()
    subprocess.run(argv, env=env, capture_output=True, timeout=SLEEP * 3)
    took = time.monotonic() - start
    time.sleep(2)
    pid = int(pid_file.read_text())
    survived = _alive(pid)
    if survived:
        os.kill(pid, 9)
    return took, survived


def run(env: BenchEnv) -> list[Row]:
    took, survived = measure(env.python, env.tmp)
    return [
        Row(
            f"--no-sandbox --max-wall {WALL:g} with a detached grandchild holding stdout",
            took,
            "s",
            target=f"ends within a few s of the wall limit ({WALL:g} s), grandchild killed",
            passed=took < WALL + 10 and not survived,
            notes=f"grandchild ({SLEEP:g} s sleep) {'survived' if survived else 'killed'}",
        )
    ]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as work:
        seconds, left = measure(sys.executable, Path(work))
        print(f"run took {seconds:.1f} s (--max-wall {WALL:g}); grandchild survived: {left}")
