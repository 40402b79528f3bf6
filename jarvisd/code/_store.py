"""The workspaces of ``jarvis code``: one SQLite database, ``$JARVIS_STATE_DIR/code.db``.

A row per workspace, from its creation until ``apply`` or ``discard``: where it is,
what it was made from, what was left out, and, once the agent ran, its outcome (the
diff, the files touched, the summary, the test results). Opened as the project's other
small stores are (``jarvisd._sqlite.open_db``): WAL, any process may read and write
(the CLI, the daemon's task worker).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._errors import StoreError, WorkspaceError
from .._sqlite import describe_error, open_db

__all__ = ["STATES", "CodeStore", "Workspace", "new_workspace_id"]

#: ready: made, the agent has not run; running; done: the agent ran (see the outcome);
#: failed: the agent did not finish (its partial change is still shown); applied.
STATES = ("ready", "running", "done", "failed", "applied")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS workspaces (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    state TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS workspaces_created ON workspaces (created_at);
"""


def new_workspace_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True, slots=True)
class Workspace:
    """One workspace. ``kind`` is "git" (a worktree of the project's repository on
    ``branch``) or "copy" (a copy, with a private git directory for its history)."""

    id: str
    source: str  # the project, as given (absolute, resolved)
    kind: str
    path: str  # the work tree the agent changes
    git_dir: str  # the repository (the worktree's git dir, or the private one)
    branch: str  # refs/heads/... holding base, then result
    base: str  # the commit of the workspace as it was made
    task: str = ""
    agent: str = ""
    test: str = ""
    #: The most agent rounds: after the first, the agent goes on while the tests fail.
    rounds: int = 1
    #: The setup command (--setup, [code] setup); "" with ``no_setup`` false: detected.
    setup: str = ""
    no_setup: bool = False
    #: The sandbox image given with --image ("": [code] image, the devcontainer's, or
    #: sandbox.image; ``jarvisd.code._image``).
    image: str = ""
    state: str = "ready"
    created_at: float = 0.0
    setup_s: float = 0.0
    files: int = 0
    left_out: tuple[Mapping[str, str], ...] = ()
    more_left_out: int = 0
    #: The run's outcome, once it ran (see ``jarvisd.code._job.CodeOutcome``).
    outcome: Mapping[str, Any] = field(default_factory=dict)
    #: The id of the run on it (a jarvisd task's id when it ran as a task).
    run_id: str = ""
    #: "PID:START" of the process running the agent (while state is "running").
    runner: str = ""
    #: Candidates (``--candidates``, ``--agents``): the id of the group's first
    #: workspace, this one's number in it (from 1), and, on the first, every member's id.
    group: str = ""
    candidate: int = 0
    members: tuple[str, ...] = ()
    #: How far its run got, kept as it goes (``jarvisd.code._resume.Progress``): a run
    #: interrupted by a crash resumes from it, on the workspace as it is on disk.
    progress: Mapping[str, Any] = field(default_factory=dict)

    @property
    def shown_state(self) -> str:
        """The state, with "interrupted" for a run whose process is gone (a crash, a
        kill -9): its workspace is kept, to show or discard."""
        if self.state == "running" and not _alive(self.runner):
            return "interrupted"
        return self.state

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "source": self.source,
            "kind": self.kind,
            "path": self.path,
            "git_dir": self.git_dir,
            "branch": self.branch,
            "base": self.base,
            "task": self.task,
            "agent": self.agent,
            "test": self.test,
            "rounds": self.rounds,
            "state": self.state,
            "created_at": self.created_at,
            "setup_s": self.setup_s,
            "files": self.files,
            "left_out": [dict(x) for x in self.left_out],
            "more_left_out": self.more_left_out,
            "outcome": dict(self.outcome),
            "run_id": self.run_id,
            "runner": self.runner,
            "group": self.group,
            "candidate": self.candidate,
            "members": list(self.members),
            "shown_state": self.shown_state,
            "setup": self.setup,
            "no_setup": self.no_setup,
            "image": self.image,
            "progress": dict(self.progress),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Workspace:
        values = dict(data)
        values.pop("shown_state", None)
        values["left_out"] = tuple(dict(x) for x in values.get("left_out") or ())
        values["outcome"] = dict(values.get("outcome") or {})
        values["members"] = tuple(str(x) for x in values.get("members") or ())
        values["progress"] = dict(values.get("progress") or {})
        return cls(**values)


def this_process() -> str:
    """This process as a ``Workspace.runner``: its pid and start time (a pid alone may
    be reused)."""
    import os

    import psutil

    return f"{os.getpid()}:{psutil.Process().create_time()}"


def _alive(runner: str) -> bool:
    import psutil

    pid, _, started = runner.partition(":")
    try:
        process = psutil.Process(int(pid))
        same = abs(process.create_time() - float(started)) < 0.5
        # A zombie (its parent, a killed daemon, never reaped it) runs nothing.
        return bool(same and process.status() != psutil.STATUS_ZOMBIE)
    except (ValueError, psutil.Error):
        return False


class CodeStore:
    """The workspace table. Cheap to construct; opens the database on first use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                self._db = open_db(self.path, _SCHEMA)
            except sqlite3.Error as exc:
                raise StoreError(describe_error(exc, self.path)) from exc
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _q(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            try:
                conn = self._conn()
                with conn:
                    return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(describe_error(exc, self.path)) from exc

    def put(self, ws: Workspace) -> Workspace:
        created = ws.created_at or time.time()
        ws = replace(ws, created_at=created)
        self._q(
            "INSERT OR REPLACE INTO workspaces (id, created_at, state, data) VALUES (?, ?, ?, ?)",
            (ws.id, created, ws.state, json.dumps(ws.to_dict())),
        )
        return ws

    def update(self, ws: Workspace, **changes: Any) -> Workspace:
        return self.put(replace(ws, **changes))

    def get(self, ref: str) -> Workspace:
        """The workspace ``ref`` names (its id or a unique prefix of it)."""
        if not ref or any(c not in "0123456789abcdef" for c in ref):
            raise WorkspaceError(f"no workspace {ref!r} (see `jarvis code list`)")
        rows = self._q(
            "SELECT data FROM workspaces WHERE id >= ? AND id < ? LIMIT 2", (ref, ref + "g")
        )
        if not rows:
            raise WorkspaceError(f"no workspace {ref!r} (see `jarvis code list`)")
        if len(rows) > 1:
            raise WorkspaceError(f"workspace id prefix {ref!r} is ambiguous")
        return Workspace.from_dict(json.loads(rows[0][0]))

    def list(self, limit: int = 100) -> list[Workspace]:
        rows = self._q("SELECT data FROM workspaces ORDER BY created_at DESC LIMIT ?", (limit,))
        return [Workspace.from_dict(json.loads(r[0])) for r in rows]

    def delete(self, ws_id: str) -> None:
        self._q("DELETE FROM workspaces WHERE id = ?", (ws_id,))
