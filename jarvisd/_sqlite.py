"""Opening the project's small SQLite stores the same way everywhere."""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["open_db"]


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
