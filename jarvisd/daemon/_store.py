"""Durable task storage: one SQLite database in WAL mode.

Every write is committed before the daemon acknowledges what it records (a submission,
an event, a checkpoint), so a ``kill -9`` loses nothing that a client was told about.
WAL with ``synchronous=NORMAL`` survives process crashes (not necessarily power loss
of the last transaction), which is the failure this store is built for.

What it guards against besides:

* a damaged file: ``PRAGMA quick_check`` at open; a failure is one line naming the file
  and how to move it aside, never a traceback;
* a database truncated, replaced or deleted: a marker file beside it records that tasks
  were stored, so the daemon never silently starts from an empty one;
* a ``-wal`` file deleted while the daemon runs (what it holds would vanish at the
  next crash): see :meth:`TaskStore.keep_wal`.

Every SQLite error leaves as a :class:`StoreError` that says what is wrong (``disk
full at PATH: ...``), after the ``on_error`` hook has seen it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jarvisd._errors import StoreError, TaskNotFound, UsageError
from jarvisd._sqlite import describe_error
from jarvisd.runs import AgentSpec

from ._protocol import EventReply, TaskInfo

__all__ = ["Checkpoint", "TaskStore", "TaskSummary", "new_task_id"]

log = logging.getLogger(__name__)

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
    "rerun_of, timeout, last_seq, checkpoint_turns, cpu_seconds, memory_bytes, worker_pid, "
    # Where it ran: the last task_start's backend, or the cluster node that took it.
    "(SELECT json_extract(data, '$.node') FROM events WHERE events.task_id = tasks.id "
    "AND type IN ('task_start', 'task_placed') ORDER BY seq DESC LIMIT 1)"
)


#: Characters of a task's input a summary keeps.
SUMMARY_INPUT = 200


@dataclass(frozen=True, slots=True)
class TaskSummary:
    id: str
    state: str
    agent: str
    created_at: float
    input: str


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
        self._wal_fd: int | None = None
        self._marked = False
        self._opened = False
        #: Sees every StoreError before it is raised (the task manager pauses on it).
        self.on_error: Callable[[StoreError], None] | None = None

    @property
    def marker(self) -> Path:
        """Exists once a task was stored: an empty database is then a lost one."""
        return self.path.with_name(self.path.name + ".has-tasks")

    def open(self) -> None:
        """Open, check and (when new) create the database. Raises StoreError, with one
        line saying what to do, when it is damaged or lost its tasks."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            db = self._connect()
            try:
                self._check(db)
            except BaseException:
                db.close()
                raise
        except sqlite3.DatabaseError as exc:
            raise StoreError(self._damaged(str(exc))) from exc
        self.path.chmod(0o600)
        self._db = db
        self._opened = True
        self._marked = self.marker.exists()
        if not self._marked and self._q("SELECT 1 FROM tasks LIMIT 1"):
            self._mark()  # stored by a jarvisd from before the marker
        self._watch_wal()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=5000")
        except BaseException:
            db.close()
            raise
        return db

    def _check(self, db: sqlite3.Connection) -> None:
        problems = [str(r[0]) for r in db.execute("PRAGMA quick_check(3)").fetchall()]
        if problems != ["ok"]:
            detail = " ".join("; ".join(problems).split())  # one line, whatever SQLite says
            raise StoreError(self._damaged(f"quick_check: {detail[:300]}"))
        has_tasks = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='tasks'"
        ).fetchone()
        if has_tasks is None and self.marker.exists():
            raise StoreError(
                f"the task database {self.path} is empty or missing, yet tasks were stored "
                f"in it ({self.marker} records that): it was truncated, replaced or "
                f"deleted. Restore it, or start afresh with: mv {self.path} "
                f"{self.path}.lost; rm {self.marker}"
            )
        db.executescript(_SCHEMA)

    def _damaged(self, detail: str) -> str:
        return (
            f"the task database {self.path} is damaged ({detail}); move it aside to start "
            f"with an empty one: mv {self.path} {self.path}.damaged (and its -wal and -shm "
            "files, if any)"
        )

    def _mark(self) -> None:
        try:
            self.marker.touch(mode=0o600)
        except OSError as exc:  # tried again at the next task
            log.warning("cannot write %s: %s", self.marker, exc)
        else:
            self._marked = True

    def close(self) -> None:
        self._opened = False
        self._release()

    def _release(self) -> None:
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None
        if self._db is not None:
            self._db.close()
            self._db = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("TaskStore is not open")
        return self._db

    def _q(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run one statement, all its rows read; SQLite errors leave as StoreError."""
        try:
            if self._db is None and self._opened:  # a reopen failed: try again
                self._db = self._connect()
            return self.db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: sqlite3.Error) -> StoreError:
        error = StoreError(describe_error(exc, self.path))
        if self.on_error is not None:
            self.on_error(error)
        return error

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first row of one statement (None: no row)."""
        rows = self._q(sql, params)
        return rows[0] if rows else None

    def probe(self) -> None:
        """One small write, to learn whether writing works again (raises StoreError)."""
        self._q("BEGIN IMMEDIATE")
        try:
            self._q("CREATE TABLE IF NOT EXISTS probe (at REAL)")
            self._q("DELETE FROM probe")
            self._q("INSERT INTO probe VALUES (?)", (time.time(),))
            self._q("COMMIT")
        finally:
            self._rollback()

    def _rollback(self) -> None:
        # A failed COMMIT (SQLITE_FULL) has often rolled back already: a ROLLBACK then
        # raises "no transaction is active" and would hide the real error.
        if self._db is not None and self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    # -- the write-ahead log ----------------------------------------------------------

    def _watch_wal(self) -> None:
        """Hold the -wal file open to see its link count (0: someone deleted it)."""
        with contextlib.suppress(OSError):  # none yet: looked for again next time
            self._wal_fd = os.open(f"{self.path}-wal", os.O_RDONLY | os.O_CLOEXEC)

    def wal_deleted(self) -> bool:
        if self._wal_fd is None and self._db is not None:
            self._watch_wal()  # SQLite makes it at the first transaction
        return self._wal_fd is not None and os.fstat(self._wal_fd).st_nlink == 0

    def keep_wal(self) -> bool:
        """Checkpoint the WAL into the database (PASSIVE: never waits on anyone), so a
        crash can lose no more than a few seconds even should the -wal file go.

        When the -wal file was deleted (its link count is 0), SQLite keeps writing to
        the unlinked file and the next crash loses everything since the last
        checkpoint: checkpoint at once, then reopen so SQLite makes a new -wal file.
        Returns True when that happened."""
        deleted = self.wal_deleted()
        self._q("PRAGMA wal_checkpoint(PASSIVE)")
        if deleted:
            log.warning(
                "the write-ahead log %s-wal was deleted while jarvisd ran: "
                "checkpointed it into %s and started a new one",
                self.path,
                self.path,
            )
            self._release()
            self._q("PRAGMA user_version")  # reconnects (or fails, and _q says why)
            self._watch_wal()
        return deleted

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
        self._q(
            "INSERT INTO tasks (id, state, spec, created_at, watch, watch_active, rerun_of, "
            "timeout) VALUES (?, 'queued', ?, ?, ?, ?, ?, ?)",
            (
                task_id,
                json.dumps(spec.to_dict()),
                now,
                watch,
                int(watch is not None),
                rerun_of,
                timeout,
            ),
        )
        if not self._marked:
            self._mark()
        return self.get(task_id)

    def resolve(self, ref: str) -> str:
        """The full id of the task ``ref`` names (a whole id or a unique prefix)."""
        if not ref or any(c not in "0123456789abcdef" for c in ref):
            raise TaskNotFound(f"no task {ref!r}")
        rows = self._q("SELECT id FROM tasks WHERE id >= ? AND id < ? LIMIT 2", (ref, ref + "g"))
        if not rows:
            raise TaskNotFound(f"no task {ref!r}")
        if len(rows) > 1 and rows[0][0] != ref:
            raise UsageError(f"task id prefix {ref!r} is ambiguous")
        return str(rows[0][0])

    def get(self, ref: str) -> TaskInfo:
        task_id = self.resolve(ref)
        row = self._one(f"SELECT {_COLUMNS} FROM tasks WHERE id = ?", (task_id,))
        return _info(row)

    def list_tasks(self, states: Iterable[str] = (), limit: int = 100) -> list[TaskInfo]:
        wanted = tuple(states)
        if wanted:
            marks = ",".join("?" * len(wanted))
            rows = self._q(
                f"SELECT {_COLUMNS} FROM tasks WHERE state IN ({marks}) "
                "ORDER BY created_at DESC LIMIT ?",
                (*wanted, limit),
            )
        else:
            rows = self._q(
                f"SELECT {_COLUMNS} FROM tasks ORDER BY created_at DESC LIMIT ?", (limit,)
            )
        return [_info(r) for r in rows]

    def summaries(
        self,
        states: Iterable[str] = (),
        agent: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[TaskSummary]:
        """What a list of tasks shows (the web console's), newest first, without
        decoding each spec: a page of 1,000 tasks is read in milliseconds."""
        where: list[str] = []
        params: list[Any] = []
        wanted = tuple(states)
        if wanted:
            where.append(f"state IN ({','.join('?' * len(wanted))})")
            params += wanted
        if agent is not None:
            where.append("COALESCE(json_extract(spec, '$.agent'), '') = ?")
            params.append(agent)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = self._q(
            "SELECT id, state, COALESCE(json_extract(spec, '$.agent'), ''), created_at, "
            f"substr(COALESCE(json_extract(spec, '$.input'), ''), 1, {SUMMARY_INPUT}) "
            f"FROM tasks {clause}ORDER BY created_at DESC LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [TaskSummary(str(i), str(st), str(a), float(c), str(t)) for i, st, a, c, t in rows]

    def ids_in(self, *states: str) -> list[str]:
        marks = ",".join("?" * len(states))
        rows = self._q(f"SELECT id FROM tasks WHERE state IN ({marks}) ORDER BY created_at", states)
        return [str(r[0]) for r in rows]

    def counts(self) -> dict[str, int]:
        rows = self._q("SELECT state, COUNT(*) FROM tasks GROUP BY state")
        return {str(state): int(n) for state, n in rows}

    def mark_running(self, task_id: str, pid: int, pid_started: float) -> None:
        self._q(
            "UPDATE tasks SET state='running', started_at=COALESCE(started_at, ?), "
            "attempts=attempts+1, worker_pid=?, worker_started=? WHERE id=?",
            (time.time(), pid, pid_started, task_id),
        )

    def requeue(self, task_id: str, reason: str) -> None:
        self._q(
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
        self._q(
            "UPDATE tasks SET state=?, reason=?, result=?, finished_at=?, worker_pid=NULL, "
            "cpu_seconds=COALESCE(?, cpu_seconds), memory_bytes=COALESCE(?, memory_bytes) "
            "WHERE id=?",
            (
                state,
                reason,
                None if result is None else json.dumps(dict(result)),
                time.time(),
                cpu_seconds,
                memory_bytes,
                task_id,
            ),
        )

    def set_usage(self, task_id: str, cpu_seconds: float, memory_bytes: int) -> None:
        self._q(
            "UPDATE tasks SET cpu_seconds=?, memory_bytes=? WHERE id=?",
            (cpu_seconds, memory_bytes, task_id),
        )

    def stop_watching(self, task_id: str) -> None:
        self._q("UPDATE tasks SET watch_active=0 WHERE id=?", (task_id,))

    def active_watches(self) -> list[tuple[str, str]]:
        rows = self._q("SELECT id, watch FROM tasks WHERE watch_active=1 AND watch IS NOT NULL")
        return [(str(i), str(w)) for i, w in rows]

    def worker_of(self, task_id: str) -> tuple[int | None, float | None]:
        row = self._one("SELECT worker_pid, worker_started FROM tasks WHERE id=?", (task_id,))
        return (None, None) if row is None else (row[0], row[1])

    # -- events ---------------------------------------------------------------------

    def append_event(
        self, task_id: str, type: str, data: Mapping[str, Any], ts: float | None = None
    ) -> EventReply:
        """Store one event and return it with its sequence number (1, 2, ...)."""
        ts = time.time() if ts is None else ts
        text = json.dumps(dict(data), ensure_ascii=False, default=repr)
        self._q("BEGIN IMMEDIATE")
        try:
            (seq,) = self._q(
                "UPDATE tasks SET last_seq=last_seq+1 WHERE id=? RETURNING last_seq", (task_id,)
            )[0]
            self._q(
                "INSERT INTO events (task_id, seq, type, data, ts) VALUES (?, ?, ?, ?, ?)",
                (task_id, seq, type, text, ts),
            )
            self._q("COMMIT")
        finally:
            self._rollback()
        return EventReply(seq=int(seq), event=type, data=json.loads(text), timestamp=ts)

    def events(self, task_id: str, since: int = 0, limit: int = 1000) -> list[EventReply]:
        rows = self._q(
            "SELECT seq, type, data, ts FROM events WHERE task_id=? AND seq>? ORDER BY seq LIMIT ?",
            (task_id, since, limit),
        )
        return [
            EventReply(seq=s, event=t, data=json.loads(d), timestamp=ts) for s, t, d, ts in rows
        ]

    def open_tool_calls(self, task_id: str, since: int = 0) -> list[dict[str, Any]]:
        """TOOL_CALL_START events after ``since`` with no matching TOOL_CALL_END."""
        open_calls: dict[str, dict[str, Any]] = {}
        rows = self._q(
            "SELECT seq, type, data FROM events WHERE task_id=? AND seq>? "
            "AND type IN ('tool_call_start', 'tool_call_end') ORDER BY seq",
            (task_id, since),
        )
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
        (count,) = self._one(
            "SELECT COUNT(*) FROM events WHERE task_id=? AND type='task_resumed' "
            "AND json_extract(data, '$.crash') = 1",
            (task_id,),
        )
        return int(count)

    def tool_calls_since(self, task_id: str, since: int) -> int:
        (count,) = self._one(
            "SELECT COUNT(*) FROM events WHERE task_id=? AND seq>? AND type='tool_call_start'",
            (task_id, since),
        )
        return int(count)

    # -- checkpoints ----------------------------------------------------------------

    def save_checkpoint(self, task_id: str, state: Mapping[str, Any]) -> None:
        self._q(
            "UPDATE tasks SET checkpoint=?, checkpoint_seq=last_seq, "
            "checkpoint_turns=checkpoint_turns+1 WHERE id=?",
            (json.dumps(dict(state)), task_id),
        )

    def checkpoint(self, task_id: str) -> Checkpoint:
        row = self._one(
            "SELECT checkpoint, checkpoint_seq, checkpoint_turns FROM tasks WHERE id=?",
            (task_id,),
        )
        if row is None:
            raise TaskNotFound(f"no task {task_id!r}")
        state = None if row[0] is None else json.loads(row[0])
        return Checkpoint(state, int(row[1]), int(row[2]))


def _info(row: tuple[Any, ...]) -> TaskInfo:
    (
        task_id,
        state,
        spec,
        created,
        started,
        finished,
        reason,
        result,
        attempts,
        watch,
        rerun_of,
        timeout,
        last_seq,
        turns,
        cpu,
        mem,
        pid,
        node,
    ) = row
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
        # Tasks run before there were backends ran here.
        node=node or ("" if started is None else "local"),
    )
