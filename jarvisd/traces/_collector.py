"""Traces: every run's events, stored in SQLite (``paths().data / "traces.db"``).

A :class:`TraceCollector` subscribes to a run's EventBus. A trace opens at the first
event of a top-level run (RUN_START or depth-0 AGENT_TURN_START) and is written when
the top-level agent's turn ends (AGENT_TURN_END at depth 0, or RUN_END). Nested agents'
events land in the same trace. Writing never breaks a run (the bus logs and skips
subscribers that raise).

Events can come from a sandboxed program, so a trace is bounded in bytes: an event
larger than ``MAX_EVENT_BYTES`` (as JSON) is kept as a stub saying how large it was,
and once a trace holds ``MAX_TRACE_BYTES`` of events the rest are counted
(``events_dropped`` in the trace's last event) but not kept. The summary fields
(turns, tool calls, tokens) still count every event.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import TaskNotFound
from .._events import Event, EventBus, EventType
from .._sqlite import open_db

__all__ = [
    "MAX_EVENT_BYTES",
    "MAX_TRACE_BYTES",
    "Trace",
    "TraceCollector",
    "TraceStore",
    "default_trace_path",
]

log = logging.getLogger(__name__)

#: The largest event a trace keeps whole (JSON bytes); larger ones become a stub.
MAX_EVENT_BYTES = 64 * 1024
#: The events one trace keeps in all (JSON bytes); later ones are counted, not kept.
MAX_TRACE_BYTES = 8 * 1024 * 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL DEFAULT '',
    agent TEXT NOT NULL DEFAULT '',
    input TEXT NOT NULL DEFAULT '',
    content TEXT NOT NULL DEFAULT '',
    started REAL NOT NULL,
    ended REAL NOT NULL,
    turns INTEGER NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    events TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS traces_started ON traces(started);
"""


def default_trace_path() -> Path:
    from .._paths import paths

    return paths().data / "traces.db"


@dataclass(slots=True)
class Trace:
    id: str
    started: float
    run_id: str = ""
    agent: str = ""
    input: str = ""
    content: str = ""
    ended: float = 0.0
    turns: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    #: Bytes of JSON in ``events`` and events left out past MAX_TRACE_BYTES (not stored).
    events_bytes: int = 0
    events_dropped: int = 0

    def keep(self, event: Event) -> None:
        """Add ``event`` within the trace's byte bounds."""
        if self.events_dropped:
            self.events_dropped += 1
            return
        record = event.to_dict()
        try:
            size = len(json.dumps(record, default=str))
        except RecursionError:  # nested too deeply to store: a stub like an oversized one
            size = MAX_EVENT_BYTES + 1
        if size > MAX_EVENT_BYTES:
            record = {
                "type": record["type"],
                "timestamp": record["timestamp"],
                "data": {"truncated": True, "bytes": size},
            }
            size = 100
        if self.events_bytes + size > MAX_TRACE_BYTES:
            self.events_dropped = 1
            return
        self.events.append(record)
        self.events_bytes += size

    def close_events(self) -> None:
        """Say in the events how many were left out (before the trace is saved)."""
        if self.events_dropped:
            self.events.append(
                {
                    "type": "events_dropped",
                    "timestamp": time.time(),
                    "data": {"count": self.events_dropped, "limit_bytes": MAX_TRACE_BYTES},
                }
            )

    @property
    def duration_s(self) -> float:
        return max(self.ended - self.started, 0.0)

    def summary(self) -> dict[str, object]:
        return {
            "id": self.id,
            "run_id": self.run_id,
            "agent": self.agent,
            "input": self.input,
            "content": self.content,
            "started": self.started,
            "duration_s": round(self.duration_s, 6),
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "error": self.error,
        }

    def to_dict(self) -> dict[str, object]:
        return {**self.summary(), "events": self.events}


class TraceStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = open_db(self.path or default_trace_path(), _SCHEMA)
        return self._conn

    def save(self, trace: Trace) -> None:
        with self._lock:
            db = self._db()
            db.execute(
                "INSERT OR REPLACE INTO traces VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    trace.id,
                    trace.run_id,
                    trace.agent,
                    trace.input,
                    trace.content,
                    trace.started,
                    trace.ended,
                    trace.turns,
                    trace.tool_calls,
                    trace.prompt_tokens,
                    trace.completion_tokens,
                    trace.error,
                    json.dumps(trace.events, default=str),
                ),
            )
            db.commit()

    def list(self, limit: int = 20) -> list[Trace]:
        with self._lock:
            rows = (
                self._db()
                .execute("SELECT * FROM traces ORDER BY started DESC LIMIT ?", (max(1, limit),))
                .fetchall()
            )
        return [_row(r, with_events=False) for r in rows]

    def get(self, trace_id: str) -> Trace:
        with self._lock:
            rows = (
                self._db()
                .execute(
                    "SELECT * FROM traces WHERE id = ? OR substr(id, 1, ?) = ? "
                    "ORDER BY started DESC LIMIT 2",
                    (trace_id, len(trace_id), trace_id),  # a prefix, no wildcards
                )
                .fetchall()
            )
        if not rows:
            raise TaskNotFound(f"no trace {trace_id!r} (see `jarvis trace list`)")
        exact = [r for r in rows if r[0] == trace_id]
        if not exact and len(rows) > 1:
            raise TaskNotFound(f"trace id prefix {trace_id!r} is ambiguous")
        return _row((exact or rows)[0], with_events=True)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _row(row: tuple[Any, ...], *, with_events: bool) -> Trace:
    return Trace(
        id=row[0],
        run_id=row[1],
        agent=row[2],
        input=row[3],
        content=row[4],
        started=row[5],
        ended=row[6],
        turns=row[7],
        tool_calls=row[8],
        prompt_tokens=row[9],
        completion_tokens=row[10],
        error=row[11],
        events=json.loads(row[12]) if with_events else [],
    )


class TraceCollector:
    """Collects one bus's events into traces and saves each finished trace."""

    def __init__(self, store: TraceStore | None = None, run_id: str = "") -> None:
        self._own_store = store is None
        self.store = store or TraceStore()
        self.run_id = run_id
        self.current: Trace | None = None
        self.saved: list[str] = []

    def attach(self, bus: EventBus) -> TraceCollector:
        bus.subscribe(self)
        return self

    def detach(self, bus: EventBus, error: str = "") -> None:
        """Stop listening; a run that ended without its final event (an exception,
        a cancellation) is still saved, with ``error``."""
        bus.unsubscribe(self)
        trace, self.current = self.current, None
        if trace is not None:
            trace.ended = time.time()
            trace.error = trace.error or error or "the run ended without a result"
            trace.close_events()
            try:
                self.store.save(trace)
            except sqlite3.Error as exc:  # a trace is a record, never a reason to fail
                log.warning("run %s was not recorded in the trace store: %s", trace.id, exc)
                return
            self.saved.append(trace.id)
        if self._own_store:
            self.store.close()

    def __call__(self, event: Event) -> None:
        data: Mapping[str, Any] = event.data
        top = int(data.get("depth", 0) or 0) == 0
        if self.current is None and event.type is EventType.NET_CONNECT:
            return  # a connection that closed after the run's trace did: not a new run
        if self.current is None:
            self.current = Trace(uuid.uuid4().hex[:12], event.timestamp, run_id=self.run_id)
        trace = self.current
        trace.keep(event)
        if event.type is EventType.AGENT_TURN_START and top and not trace.agent:
            trace.agent = str(data.get("agent", ""))
            trace.input = str(data.get("input", ""))
        elif event.type is EventType.TOOL_CALL_END:
            trace.tool_calls += 1
        elif event.type is EventType.INFERENCE_END:
            # An engine call that failed is in the events; it marks the trace as failed
            # only when the run fails with it (a sub-call error the run survived, or a
            # sub-call cancelled by a REPL timeout, does not).
            trace.prompt_tokens += int(data.get("prompt_tokens", 0) or 0)
            trace.completion_tokens += int(data.get("completion_tokens", 0) or 0)
        if (event.type is EventType.AGENT_TURN_END and top) or event.type is EventType.RUN_END:
            trace.content = str(data.get("content", trace.content))
            trace.turns = int(data.get("turns", trace.turns) or 0)
            if data.get("error"):
                trace.error = str(data["error"])
            trace.ended = time.time()
            self.current = None
            trace.close_events()
            try:
                self.store.save(trace)
            except sqlite3.Error as exc:  # a trace is a record, never a reason to fail
                log.warning("run %s was not recorded in the trace store: %s", trace.id, exc)
                return
            self.saved.append(trace.id)
