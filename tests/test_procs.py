"""Small facts about processes (``jarvisd._procs``)."""

from __future__ import annotations

import subprocess
import sys
import time

from jarvisd._procs import pid_alive


def test_a_killed_process_not_yet_reaped_is_not_alive() -> None:
    """A worker whose daemon was killed is adopted by whatever reaps orphans here, which
    may take its time: killed, it is a zombie, and the orphan sweep must see its
    containers as ownerless (else a resumed ACP session ran beside its old agent)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(child.pid)
        child.kill()
        deadline = time.monotonic() + 10
        while pid_alive(child.pid):  # a zombie now: not reaped until wait()
            assert time.monotonic() < deadline, "a killed process still counts as alive"
            time.sleep(0.01)
        with open(f"/proc/{child.pid}/stat", "rb") as stat:
            assert stat.read().rpartition(b")")[2].split()[0] == b"Z"
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid)
