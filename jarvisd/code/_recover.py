"""Finishing applies that were interrupted (kill -9, a crash, a power cut).

Every ``jarvis code`` command, and every apply before it starts, looks for apply
journals (``jarvisd.code._journal``). One that reached its commit point is rolled
forward, its workspace marked applied and removed; any other is rolled back. Either
way every temporary and backup goes, and the journal last, so an interruption of the
recovery itself is recovered the same way. It runs under the apply lock; when a live
apply holds it, the journal is that apply's and is left alone.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .._errors import WorkspaceError
from ._journal import COMMITTED, Journal, locked, pending
from ._steps import DIR_FLAGS, roll_back, roll_forward
from ._store import CodeStore

__all__ = ["finish", "recover", "recover_locked"]


def recover(store: CodeStore, state_dir: Path) -> list[str]:
    """Recover every interrupted apply, unless an apply is running; what was done, one
    line each, for a person (empty when there was nothing to do)."""
    if not pending(state_dir):
        return []
    with locked(state_dir, wait_s=0.0) as held:
        if not held:
            return []
        return recover_locked(store, state_dir)[0]


def recover_locked(store: CodeStore, state_dir: Path) -> tuple[list[str], set[str]]:
    """As :func:`recover`, the lock held by the caller; and the projects (their paths)
    whose interrupted apply is still unresolved ("" for a journal that cannot be read)."""
    said: list[str] = []
    unresolved: set[str] = set()
    for path in pending(state_dir):
        try:
            journal = Journal.from_json(path.read_bytes())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            said.append(f"warning: cannot read the apply journal {path} ({exc}); left in place")
            unresolved.add("")
            continue
        try:
            said.append(_resolve(journal, store, state_dir))
        except (OSError, WorkspaceError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) else str(exc)
            said.append(
                f"warning: could not finish the interrupted apply of workspace "
                f"{journal.workspace} to {journal.source} ({detail}); the next `jarvis code` "
                "command tries again"
            )
            unresolved.add(journal.source)
    return said, unresolved


def _resolve(journal: Journal, store: CodeStore, state_dir: Path) -> str:
    try:
        root_fd = os.open(journal.source, DIR_FLAGS)
    except FileNotFoundError:
        journal.remove(state_dir)
        return (
            f"the project {journal.source} of an interrupted apply of workspace "
            f"{journal.workspace} is gone; its journal was removed"
        )
    try:
        if journal.phase == COMMITTED:
            roll_forward(root_fd, journal)
        else:
            left = roll_back(root_fd, journal)
    finally:
        os.close(root_fd)
    if journal.phase == COMMITTED:
        finish(journal, store, state_dir)
        return (
            f"completed the interrupted apply of workspace {journal.workspace} to "
            f"{journal.source} ({len(journal.entries)} file(s))"
        )
    journal.remove(state_dir)
    kept = f" (kept the directories {', '.join(left)}: they hold other files)" if left else ""
    return (
        f"rolled back the interrupted apply of workspace {journal.workspace}: "
        f"{journal.source} is as it was{kept}; apply it again with "
        f"`jarvis code apply {journal.workspace}`"
    )


def finish(journal: Journal, store: CodeStore, state_dir: Path) -> None:
    """After the roll-forward: record the workspace as applied, remove it, then the
    journal (last, so a kill in between repeats these steps, which are idempotent)."""
    from ._workspace import discard

    with contextlib.suppress(WorkspaceError):  # no record: discarded meanwhile
        ws = store.get(journal.workspace)
        if ws.state != "applied":
            ws = store.update(ws, state="applied")
        discard(ws, store, state_dir, forget=False)
    journal.remove(state_dir)
