"""The records of ``jarvis acp`` sessions: one append-only JSON-lines file each.

A session's file starts with its header (cwd, agent, mode, model, when) and then holds
every ``session/update`` jarvis sent for it, the client's prompts included (as
``user_message_chunk``), each line written whole with one ``write`` on an
``O_APPEND`` descriptor. So the file is the session's history after the editor,
jarvis or the machine restarted: ``session/load`` replays it, and a half-written last
line (kill -9 mid-write) is skipped. Ids are jarvis's own (32 hex digits), checked
before they name a file. A file stops growing at :data:`MAX_SESSION_BYTES`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import UsageError

__all__ = ["MAX_SESSION_BYTES", "SessionHeader", "SessionRecord", "SessionStore"]

log = logging.getLogger(__name__)

#: The most a session's record grows to (later updates are sent, not recorded).
MAX_SESSION_BYTES = 32 * 1024 * 1024
#: The longest line read back (one update; longer ones are skipped).
MAX_RECORD_LINE = 4 * 1024 * 1024
#: Sessions ``jarvis acp sessions`` and ``session/list`` show at most.
MAX_LISTED = 1000
_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True, slots=True)
class SessionHeader:
    session_id: str
    cwd: str
    agent: str
    mode: str
    model: str
    created: float
    updated: float = 0.0
    title: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "cwd": self.cwd,
            "agent": self.agent,
            "mode": self.mode,
            "model": self.model,
            "created": self.created,
            "updated": self.updated,
            "title": self.title,
        }


class SessionRecord:
    """The open record of one session (appends only)."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self._size = size
        self._full_warned = False

    def append(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        if self._size + len(line) > MAX_SESSION_BYTES or len(line) > MAX_RECORD_LINE:
            if not self._full_warned:
                log.warning("session record %s is full: later updates are not kept", self.path)
                self._full_warned = True
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        self._size += len(line)


class SessionStore:
    """Where the session records live (``<data>/acp/sessions``)."""

    def __init__(self, root: Path | None = None) -> None:
        if root is None:
            from .._paths import paths

            root = paths().data / "acp" / "sessions"
        self.root = root

    def _path(self, session_id: str) -> Path:
        if not isinstance(session_id, str) or not _ID.fullmatch(session_id):
            raise UsageError(f"no such session: {str(session_id)[:80]!r}")
        return self.root / f"{session_id}.jsonl"

    def create(
        self, *, cwd: str, agent: str, mode: str, model: str
    ) -> tuple[SessionHeader, SessionRecord]:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        header = SessionHeader(uuid.uuid4().hex, cwd, agent, mode, model, time.time())
        record = SessionRecord(self._path(header.session_id), 0)
        record.append({"kind": "session", **header.to_dict()})
        return header, record

    def open(self, session_id: str) -> tuple[SessionHeader, SessionRecord, list[dict[str, Any]]]:
        """A recorded session: its header (mode and model as last set), its record
        (to append to) and the updates it holds. UsageError when there is none."""
        path = self._path(session_id)
        try:
            path.stat()
        except FileNotFoundError:
            raise UsageError(f"no such session: {session_id}") from None
        header: SessionHeader | None = None
        updates: list[dict[str, Any]] = []
        for record in _records(path):
            kind = record.get("kind")
            if kind == "session" and header is None:
                header = _header(record)
            elif header is not None and kind == "set" and isinstance(record.get("value"), str):
                field = record.get("field")
                if field in ("mode", "model"):
                    header = _replace(header, **{str(field): record["value"]})
            elif header is not None and kind == "update" and isinstance(record.get("update"), dict):
                updates.append(record["update"])
        if header is None:
            raise UsageError(f"session {session_id} has no readable record")
        _end_torn_line(path)
        return header, SessionRecord(path, path.stat().st_size), updates

    def list(self, cwd: str | None = None) -> list[SessionHeader]:
        """The sessions recorded, newest first (their header, when they were last
        updated, and their first prompt as the title)."""
        try:
            files = sorted(
                (p for p in self.root.iterdir() if p.suffix == ".jsonl" and _ID.fullmatch(p.stem)),
                key=lambda p: p.stat().st_mtime,
                reverse=True,
            )[:MAX_LISTED]
        except (FileNotFoundError, NotADirectoryError):
            return []
        found: list[SessionHeader] = []
        for path in files:
            header = _summary(path)
            if header is not None and (cwd is None or header.cwd == cwd):
                found.append(header)
        return found


def _records(path: Path, *, first: int | None = None) -> Iterator[dict[str, Any]]:
    """The whole, parsable records of a file (a partial or damaged line is skipped)."""
    try:
        stream = path.open("rb")
    except OSError:
        return
    with stream:
        count = 0
        while first is None or count < first:
            line = stream.readline(MAX_RECORD_LINE + 1)
            if not line:
                return
            if not line.endswith(b"\n"):
                # Too long (drop the rest of it) or cut short by a crash: not a record.
                while line and not line.endswith(b"\n"):
                    line = stream.readline(MAX_RECORD_LINE + 1)
                continue
            count += 1
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict):
                yield record


def _end_torn_line(path: Path) -> None:
    """End a last line cut short (a crash mid-write) so that the next record starts a
    line of its own instead of joining the fragment and being lost with it."""
    with path.open("rb+") as stream:
        if stream.seek(0, os.SEEK_END) == 0:
            return
        stream.seek(-1, os.SEEK_END)
        if stream.read(1) != b"\n":
            stream.write(b"\n")


def _header(record: Mapping[str, Any]) -> SessionHeader | None:
    try:
        return SessionHeader(
            session_id=str(record["session_id"]),
            cwd=str(record["cwd"]),
            agent=str(record.get("agent", "")),
            mode=str(record.get("mode", "")),
            model=str(record.get("model", "")),
            created=float(record.get("created", 0.0)),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _replace(header: SessionHeader, **changes: Any) -> SessionHeader:
    import dataclasses

    return dataclasses.replace(header, **changes)


def _summary(path: Path) -> SessionHeader | None:
    header: SessionHeader | None = None
    title = ""
    for record in _records(path, first=50):
        if record.get("kind") == "session" and header is None:
            header = _header(record)
        elif record.get("kind") == "update" and not title:
            update = record.get("update")
            if isinstance(update, dict) and update.get("sessionUpdate") == "user_message_chunk":
                content = update.get("content")
                if isinstance(content, dict) and isinstance(content.get("text"), str):
                    title = " ".join(content["text"].split())[:80]
    if header is None:
        return None
    try:
        updated = path.stat().st_mtime
    except OSError:
        updated = header.created
    return _replace(header, updated=updated, title=title)
