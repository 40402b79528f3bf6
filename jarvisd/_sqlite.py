"""Opening the project's small SQLite stores the same way everywhere, and saying in one
line what went wrong with one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["describe_error", "open_db"]


def open_db(path: Path, schema: str) -> sqlite3.Connection:
    """A connection usable from any thread (callers serialise with their own lock), in
    WAL mode so readers never block the writer, with ``schema`` applied. Commits do not
    wait for the disk (``synchronous=NORMAL``): these stores (traces, memory) stay
    consistent after a crash and may lose only their last writes, and a `jarvis ask`
    does not pay an fsync for its trace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(schema)
    return conn


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
