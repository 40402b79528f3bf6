"""Durable task storage: one SQLite database in WAL mode.

Every write is committed before the daemon acknowledges what it records (a submission,
an event, a checkpoint), so a ``kill -9`` loses nothing that a client was told about.
WAL with ``synchronous=NORMAL`` survives process crashes (not necessarily power loss
of the last transaction), which is the failure this store is built for.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jarvisd._errors import TaskNotFound, UsageError
from jarvisd.runs import AgentSpec

from ._protocol import EventReply, TaskInfo

__all__ = ["Checkpoint", "TaskStore", "new_task_id"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    spec TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    reason TEXT NOT NULL DEFAULT '',
    result TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    watch TEXT,
    watch_active INTEGER NOT NULL DEFAULT 0,
    rerun_of TEXT,
    timeout REAL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    checkpoint TEXT,
    checkpoint_seq INTEGER NOT NULL DEFAULT 0,
    checkpoint_turns INTEGER NOT NULL DEFAULT 0,
    cpu_seconds REAL NOT NULL DEFAULT 0,
    memory_bytes INTEGER NOT NULL DEFAULT 0,
    worker_pid INTEGER,
    worker_started REAL
);
CREATE INDEX IF NOT EXISTS tasks_state ON tasks (state, created_at);
CREATE TABLE IF NOT EXISTS events (
    task_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;
"""

_COLUMNS = (
    "id, state, spec, created_at, started_at, finished_at, reason, result, attempts, watch, "
    "rerun_of, timeout, last_seq, checkpoint_turns, cpu_seconds, memory_bytes, worker_pid"
)


def new_task_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    state: Mapping[str, Any] | None
    seq: int  # the event sequence number the checkpoint was taken at
    turns: int


class TaskStore:
    """Synchronous and fast (each call is one short transaction): the daemon calls it
    from its event loop. Not thread-safe; one owner."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=5000")
        db.executescript(_SCHEMA)
        self.path.chmod(0o600)
        self._db = db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("TaskStore is not open")
        return self._db

    # -- tasks ----------------------------------------------------------------------

    def create(
        self,
        spec: AgentSpec,
        *,
        watch: str | None = None,
        timeout: float | None = None,
        rerun_of: str | None = None,
    ) -> TaskInfo:
        task_id = new_task_id()
        now = time.time()
        self.db.execute(
            "INSERT INTO tasks (id, state, spec, created_at, watch, watch_active, rerun_of, "
            "timeout) VALUES (?, 'queued', ?, ?, ?, ?, ?, ?)",
            (task_id, json.dumps(spec.to_dict()), now, watch, int(watch is not None), rerun_of,
             timeout),
        )  # fmt: skip
        return self.get(task_id)

    def resolve(self, ref: str) -> str:
        """The full id of the task ``ref`` names (a whole id or a unique prefix)."""
        if not ref or any(c not in "0123456789abcdef" for c in ref):
            raise TaskNotFound(f"no task {ref!r}")
        rows = self.db.execute(
            "SELECT id FROM tasks WHERE id >= ? AND id < ? LIMIT 2", (ref, ref + "g")
        ).fetchall()
        if not rows:
            raise TaskNotFound(f"no task {ref!r}")
        if len(rows) > 1 and rows[0][0] != ref:
            raise UsageError(f"task id prefix {ref!r} is ambiguous")
        return str(rows[0][0])

    def get(self, ref: str) -> TaskInfo:
        task_id = self.resolve(ref)
        row = self.db.execute(f"SELECT {_COLUMNS} FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return _info(row)

    def list_tasks(self, states: Iterable[str] = (), limit: int = 100) -> list[TaskInfo]:
        wanted = tuple(states)
        if wanted:
            marks = ",".join("?" * len(wanted))
            rows = self.db.execute(
                f"SELECT {_COLUMNS} FROM tasks WHERE state IN ({marks}) "
                "ORDER BY created_at DESC LIMIT ?",
                (*wanted, limit),
            ).fetchall()
        else:
            rows = self.db.execute(
                f"SELECT {_COLUMNS} FROM tasks ORDER BY created_at DESC LIMIT ?", (limit,)
            ).fetchall()
        return [_info(r) for r in rows]

    def ids_in(self, *states: str) -> list[str]:
        marks = ",".join("?" * len(states))
        rows = self.db.execute(
            f"SELECT id FROM tasks WHERE state IN ({marks}) ORDER BY created_at", states
        ).fetchall()
        return [str(r[0]) for r in rows]

    def counts(self) -> dict[str, int]:
        rows = self.db.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state").fetchall()
        return {str(state): int(n) for state, n in rows}

    def mark_running(self, task_id: str, pid: int, pid_started: float) -> None:
        self.db.execute(
            "UPDATE tasks SET state='running', started_at=COALESCE(started_at, ?), "
            "attempts=attempts+1, worker_pid=?, worker_started=? WHERE id=?",
            (time.time(), pid, pid_started, task_id),
        )

    def requeue(self, task_id: str, reason: str) -> None:
        self.db.execute(
            "UPDATE tasks SET state='queued', reason=?, worker_pid=NULL WHERE id=?",
            (reason, task_id),
        )

    def finish(
        self,
        task_id: str,
        state: str,
        reason: str = "",
        result: Mapping[str, Any] | None = None,
        *,
        cpu_seconds: float | None = None,
        memory_bytes: int | None = None,
    ) -> None:
        self.db.execute(
            "UPDATE tasks SET state=?, reason=?, result=?, finished_at=?, worker_pid=NULL, "
            "cpu_seconds=COALESCE(?, cpu_seconds), memory_bytes=COALESCE(?, memory_bytes) "
            "WHERE id=?",
            (state, reason, None if result is None else json.dumps(dict(result)), time.time(),
             cpu_seconds, memory_bytes, task_id),
        )  # fmt: skip

    def set_usage(self, task_id: str, cpu_seconds: float, memory_bytes: int) -> None:
        self.db.execute(
            "UPDATE tasks SET cpu_seconds=?, memory_bytes=? WHERE id=?",
            (cpu_seconds, memory_bytes, task_id),
        )

    def stop_watching(self, task_id: str) -> None:
        self.db.execute("UPDATE tasks SET watch_active=0 WHERE id=?", (task_id,))

    def active_watches(self) -> list[tuple[str, str]]:
        rows = self.db.execute(
            "SELECT id, watch FROM tasks WHERE watch_active=1 AND watch IS NOT NULL"
        ).fetchall()
        return [(str(i), str(w)) for i, w in rows]

    def worker_of(self, task_id: str) -> tuple[int | None, float | None]:
        row = self.db.execute(
            "SELECT worker_pid, worker_started FROM tasks WHERE id=?", (task_id,)
        ).fetchone()
        return (None, None) if row is None else (row[0], row[1])

    # -- events ---------------------------------------------------------------------

    def append_event(
        self, task_id: str, type: str, data: Mapping[str, Any], ts: float | None = None
    ) -> EventReply:
        """Store one event and return it with its sequence number (1, 2, ...)."""
        ts = time.time() if ts is None else ts
        text = json.dumps(dict(data), ensure_ascii=False, default=repr)
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            (seq,) = db.execute(
                "UPDATE tasks SET last_seq=last_seq+1 WHERE id=? RETURNING last_seq", (task_id,)
            ).fetchone()
            db.execute(
                "INSERT INTO events (task_id, seq, type, data, ts) VALUES (?, ?, ?, ?, ?)",
                (task_id, seq, type, text, ts),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return EventReply(seq=int(seq), event=type, data=json.loads(text), timestamp=ts)

    def events(self, task_id: str, since: int = 0, limit: int = 1000) -> list[EventReply]:
        rows = self.db.execute(
            "SELECT seq, type, data, ts FROM events WHERE task_id=? AND seq>? ORDER BY seq LIMIT ?",
            (task_id, since, limit),
        ).fetchall()
        return [
            EventReply(seq=s, event=t, data=json.loads(d), timestamp=ts) for s, t, d, ts in rows
        ]

    def open_tool_calls(self, task_id: str, since: int = 0) -> list[dict[str, Any]]:
        """TOOL_CALL_START events after ``since`` with no matching TOOL_CALL_END."""
        open_calls: dict[str, dict[str, Any]] = {}
        rows = self.db.execute(
            "SELECT seq, type, data FROM events WHERE task_id=? AND seq>? "
            "AND type IN ('tool_call_start', 'tool_call_end') ORDER BY seq",
            (task_id, since),
        ).fetchall()
        for seq, kind, text in rows:
            data = json.loads(text)
            key = str(data.get("call_id") or f"{data.get('tool')}#{seq}")
            if kind == "tool_call_start":
                open_calls[key] = data | {"seq": seq}
            else:
                open_calls.pop(key, None)
        return list(open_calls.values())

    def crash_resumes(self, task_id: str) -> int:
        """How many times ``task_id`` was resumed after a daemon crash."""
        (count,) = self.db.execute(
            "SELECT COUNT(*) FROM events WHERE task_id=? AND type='task_resumed' "
            "AND json_extract(data, '$.crash') = 1",
            (task_id,),
        ).fetchone()
        return int(count)

    def tool_calls_since(self, task_id: str, since: int) -> int:
        (count,) = self.db.execute(
            "SELECT COUNT(*) FROM events WHERE task_id=? AND seq>? AND type='tool_call_start'",
            (task_id, since),
        ).fetchone()
        return int(count)

    # -- checkpoints ----------------------------------------------------------------

    def save_checkpoint(self, task_id: str, state: Mapping[str, Any]) -> None:
        self.db.execute(
            "UPDATE tasks SET checkpoint=?, checkpoint_seq=last_seq, "
            "checkpoint_turns=checkpoint_turns+1 WHERE id=?",
            (json.dumps(dict(state)), task_id),
        )

    def checkpoint(self, task_id: str) -> Checkpoint:
        row = self.db.execute(
            "SELECT checkpoint, checkpoint_seq, checkpoint_turns FROM tasks WHERE id=?",
            (task_id,),
        ).fetchone()
        if row is None:
            raise TaskNotFound(f"no task {task_id!r}")
        state = None if row[0] is None else json.loads(row[0])
        return Checkpoint(state, int(row[1]), int(row[2]))


def _info(row: tuple[Any, ...]) -> TaskInfo:
    (task_id, state, spec, created, started, finished, reason, result, attempts, watch,
     rerun_of, timeout, last_seq, turns, cpu, mem, pid) = row  # fmt: skip
    return TaskInfo(
        id=task_id,
        state=state,
        spec=AgentSpec.from_dict(json.loads(spec)),
        created_at=created,
        started_at=started,
        finished_at=finished,
        reason=reason,
        result=None if result is None else json.loads(result),
        attempts=attempts,
        watch=watch,
        rerun_of=rerun_of,
        timeout=timeout,
        last_seq=last_seq,
        checkpoint_turns=turns,
        cpu_seconds=cpu,
        memory_bytes=mem,
        worker_pid=pid,
    )
