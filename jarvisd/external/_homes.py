"""Durable HOMEs for external agents run as daemon tasks.

An ACP agent that can load a session (``agentCapabilities.loadSession``) keeps that
session in its HOME. For a task to be resumed after the daemon dies, the HOME must
outlive the worker: it lives under the daemon's state dir, one directory per task
(``STATE/agent-homes/TASK``, 0700, the parent too), and goes when the task reaches a
final state, however it got there (:func:`discard_home`, called by the daemon). Homes
of tasks the store no longer runs or queues are swept at the daemon's start
(:func:`sweep_homes`): a daemon that died between a task's end and its home's removal
leaves nothing behind for long.

A run that is not a daemon task (``jarvis ask --agent``) has no need of one: its HOME
is a temporary directory, removed when the run ends.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import shutil
import stat
import threading
from collections.abc import Collection
from pathlib import Path

from .._paths import paths

__all__ = ["discard_home", "homes_root", "sweep_homes", "task_home"]

log = logging.getLogger(__name__)

#: What a task id looks like (the daemon's ids); anything else never names a directory.
_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def homes_root() -> Path:
    return paths().state / "agent-homes"


def _checked(task_id: str) -> str:
    if not _TASK_ID.match(task_id):
        raise ValueError(f"not a task id: {task_id!r}")
    return task_id


def task_home(task_id: str, *, fresh: bool) -> Path:
    """The HOME of task ``task_id``'s agent, made if missing (0700). ``fresh``: empty
    it first (a run that starts its agent from nothing must not find an earlier
    attempt's session files)."""
    root = homes_root()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)
    home = root / _checked(task_id)
    if fresh:
        shutil.rmtree(home, ignore_errors=True)
    home.mkdir(exist_ok=True, mode=0o700)
    os.chmod(home, 0o700)
    _unlink_sockets(home)
    return home


def _unlink_sockets(home: Path) -> None:
    """Remove the sockets a killed run's gateway left at the top of ``home`` (the
    gateway will not serve where something already is; nothing else listens there:
    the HOME is the task's alone)."""
    with os.scandir(home) as entries:  # closed even when a stat fails midway
        for entry in entries:
            if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                Path(entry.path).unlink(missing_ok=True)


def discard_home(task_id: str) -> None:
    """Remove task ``task_id``'s agent HOME, if it has one (its task has ended).

    The daemon calls this on its event loop, and a HOME can be large (opencode keeps a
    snapshot repository of the project it worked on), so the HOME is only renamed aside
    here, which is one system call, and removed by a thread. A daemon that dies first
    leaves the renamed directory to :func:`sweep_homes`: its name is no task's."""
    if not _TASK_ID.match(task_id):
        return
    home = homes_root() / task_id
    if not home.is_dir() or home.is_symlink():
        return
    trash = home.with_name(f".discarded-{task_id}-{os.getpid()}-{next(_discards)}")
    try:
        home.rename(trash)
    except OSError:
        log.warning("could not set aside the agent HOME %s", home, exc_info=True)
        return
    threading.Thread(
        target=shutil.rmtree, args=(trash,), kwargs={"ignore_errors": True}, daemon=True
    ).start()


_discards = itertools.count()


def sweep_homes(live: Collection[str]) -> list[str]:
    """Remove the HOMEs of tasks not in ``live`` (those still running or queued);
    returns the task ids whose HOME went."""
    root = homes_root()
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    removed = []
    for name in names:
        if name in live:
            continue
        path = root / name
        if path.is_symlink() or not path.is_dir():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
        removed.append(name)
    if removed:
        log.info("removed the agent homes of %d ended tasks", len(removed))
    return removed
