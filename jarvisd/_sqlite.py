"""Opening the project's small SQLite stores the same way everywhere, and saying in one
line what went wrong with one."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["describe_error", "open_db"]


def open_db(path: Path, schema: str) -> sqlite3.Connection:
    """A connection usable from any thread (callers serialise with their own lock), in
    WAL mode so readers never block the writer, with ``schema`` applied. Commits do not
    wait for the disk (``synchronous=NORMAL``): these stores (traces, memory) stay
    consistent after a crash and may lose only their last writes, and a `jarvis ask`
    does not pay an fsync for its trace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=_BUSY_TIMEOUT_S)
    try:
        _retry_busy(lambda: _use_wal(conn))
        conn.execute("PRAGMA synchronous=NORMAL")
        _retry_busy(lambda: conn.executescript(schema))
    except sqlite3.Error:
        conn.close()
        raise
    return conn


_BUSY_TIMEOUT_S = 10.0


def _use_wal(conn: sqlite3.Connection) -> None:
    # Reading the mode takes no lock; switching it needs one, which SQLite may refuse at
    # once (no busy wait) while another process opens the same new file.
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode=WAL")


def _retry_busy(action: Callable[[], object], attempts: int = 50) -> None:
    """``action``, tried again while another process holds the database for a moment
    (processes that open one store at the same time: task workers, `jarvis ask`)."""
    for attempt in range(attempts):
        try:
            action()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.05 + 0.01 * attempt)


def describe_error(exc: sqlite3.Error, path: Path) -> str:
    """What failed with the database at ``path``, for a person: where, and SQLite's own
    words (``disk full at /var/lib/x: database or disk is full``)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name == "SQLITE_FULL":
        return f"disk full at {path.parent}: {exc}"
    if name.startswith("SQLITE_IOERR"):
        return f"cannot write {path} ({name}): {exc}"
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")):
        return f"cannot open {path} for writing ({name}): {exc}"
    return f"task database {path}: {exc}"
