"""A memory backend on SQLite FTS5 (standard library ``sqlite3``): add text, search it
ranked by BM25. One file, ``paths().data / "memory.db"`` by default.

Queries are plain words, never FTS5 syntax: each word is quoted, so a model's query with
quotes, colons or ``AND`` cannot raise a syntax error.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .._errors import UsageError
from .._sqlite import open_db

__all__ = ["MemoryHit", "MemoryStore", "default_memory_path"]

_WORD = re.compile(r"\w+", re.UNICODE)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    id INTEGER PRIMARY KEY,
    text TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT '',
    metadata TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
    text, content='memories', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
"""


def default_memory_path() -> Path:
    from .._paths import paths

    return paths().data / "memory.db"


@dataclass(frozen=True, slots=True)
class MemoryHit:
    id: int
    text: str
    score: float
    source: str = ""
    metadata: Mapping[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "text": self.text,
            "score": self.score,
            "source": self.source,
            "metadata": dict(self.metadata),
        }


class MemoryStore:
    """Thread-safe; the connection opens on first use (construction does no I/O)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = open_db(self.path or default_memory_path(), _SCHEMA)
        return self._conn

    def add(
        self, text: str, *, source: str = "", metadata: Mapping[str, object] | None = None
    ) -> int:
        if not text.strip():
            raise UsageError("memory text is empty")
        with self._lock:
            db = self._db()
            cur = db.execute(
                "INSERT INTO memories(text, source, metadata, created) VALUES (?, ?, ?, ?)",
                (text, source, json.dumps(dict(metadata or {})), time.time()),
            )
            db.commit()
            return int(cur.lastrowid or 0)

    def search(self, query: str, k: int = 5) -> list[MemoryHit]:
        words = _WORD.findall(query)
        if not words:
            return []
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words[:32])
        with self._lock:
            rows = (
                self._db()
                .execute(
                    "SELECT m.id, m.text, m.source, m.metadata, bm25(memories_fts) AS rank "
                    "FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
                    "WHERE memories_fts MATCH ? ORDER BY rank LIMIT ?",
                    (match, max(1, k)),
                )
                .fetchall()
            )
        return [
            MemoryHit(int(r[0]), r[1], -float(r[4]), r[2], json.loads(r[3] or "{}")) for r in rows
        ]

    def count(self) -> int:
        with self._lock:
            return int(self._db().execute("SELECT count(*) FROM memories").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
