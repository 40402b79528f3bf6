"""A worker's process tree, seen through psutil: its usage, and ending all of it.

A task's worker may start processes that leave its process group (setsid) or are
re-parented; none may outlive the task. psutil checks a process's start time before
it signals it, so a recycled pid is never touched. (psutil is imported inside each
function: the daemon's socket answers before it is loaded.)
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from psutil import Process

__all__ = ["end_processes", "kill_stale_worker", "kill_tree", "running_now", "snapshot_tree"]


def _tree(pid: int) -> list[Process]:
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def snapshot_tree(pid: int) -> tuple[list[Process], float, int]:
    """``pid`` and its descendants (psutil processes), with their CPU seconds (user +
    system) and resident memory."""
    import psutil

    procs = _tree(pid)
    cpu, rss = 0.0, 0
    for proc in procs:
        try:
            times = proc.cpu_times()
            cpu += times.user + times.system
            rss += proc.memory_info().rss
        except psutil.Error:
            continue
    return procs, cpu, rss


def running_now(proc: Process) -> bool:
    import psutil

    try:
        return bool(proc.is_running()) and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def end_processes(procs: Iterable[Process]) -> None:
    """SIGKILL each process still running (psutil checks its start time, so a recycled
    pid is never touched)."""
    import psutil

    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def kill_tree(pid: int, grace: float = 1.0) -> None:
    """End ``pid`` and every descendant: SIGTERM, then SIGKILL after ``grace``."""
    import psutil

    procs = _tree(pid)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace)
    end_processes(alive)
    # Descendants already re-parented away from the worker are still in its session.
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


def kill_stale_worker(pid: int | None, started: float | None) -> bool:
    """End a worker left over from a daemon that died, if it still runs (same pid and
    start time, so a recycled pid is never touched)."""
    import psutil

    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if started is not None and abs(proc.create_time() - started) > 0.5:
            return False
    except psutil.Error:
        return False
    kill_tree(pid, grace=0.5)
    return True
