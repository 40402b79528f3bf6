"""The intent journal of ``jarvis code apply``, and the lock that serialises applies.

Before the first byte goes into the project, apply writes (and fsyncs) a journal in
``$JARVIS_STATE_DIR/code-apply/ID.json``: every file it will touch, with the names of
its temporary and its backup beside it (derived from the workspace id, so a later
process finds them without guessing), the hash of the new content, and the
directories it will create. Its ``phase`` says which way an interrupted apply goes:
``prepared`` (temporaries may exist, the project's files are untouched) rolls back;
``committed`` (every temporary is complete) rolls forward; ``rolling-back`` (a failure
after the commit point) rolls back using the backups. The journal is removed only when
the apply (or its rollback) is entirely done, so any later ``jarvis code`` command can
finish the job (``jarvisd.code._recover``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .._errors import WorkspaceError

__all__ = [
    "COMMITTED",
    "PREPARED",
    "ROLLING_BACK",
    "Entry",
    "Journal",
    "content_hash",
    "fsync_dir",
    "journal_dir",
    "locked",
    "pending",
    "side_names",
]

PREPARED, COMMITTED, ROLLING_BACK = "prepared", "committed", "rolling-back"
_PHASES = (PREPARED, COMMITTED, ROLLING_BACK)
#: How much of a file's name its temporary keeps (a name is at most 255 bytes).
_KEPT = 100


@dataclass(frozen=True, slots=True)
class Entry:
    """One file of the change, relative to the project."""

    path: str
    temp: str | None  # the temporary's name beside the target; None: the file is deleted
    backup: str  # the hard link that keeps the replaced file until the end
    existed: bool  # whether the project had the file when the apply began
    sha256: str | None  # the new content's hash (None for a deletion)


@dataclass(slots=True)
class Journal:
    workspace: str
    source: str
    entries: list[Entry]
    dirs: list[str] = field(default_factory=list)  # created by the apply, parents first
    phase: str = PREPARED

    def to_json(self) -> bytes:
        return json.dumps({"version": 1, **asdict(self)}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Journal:
        raw = json.loads(data)
        if not isinstance(raw, dict) or raw.get("phase") not in _PHASES:
            raise ValueError("not an apply journal")
        entries = [Entry(**e) for e in raw["entries"]]
        return cls(
            str(raw["workspace"]),
            str(raw["source"]),
            entries,
            [str(d) for d in raw["dirs"]],
            str(raw["phase"]),
        )

    def save(self, state_dir: Path) -> None:
        """Write the journal atomically and durably (file and directory fsynced)."""
        folder = journal_dir(state_dir)
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{self.workspace}.json"
        part = folder / f"{self.workspace}.json.part"
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            data = self.to_json()
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(part, final)
        fsync_dir(folder)

    def remove(self, state_dir: Path) -> None:
        folder = journal_dir(state_dir)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / f"{self.workspace}.json")
        fsync_dir(folder)


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def side_names(name: str, ws_id: str) -> tuple[str, str]:
    """The temporary and backup names beside file ``name`` for workspace ``ws_id``:
    hidden, fixed for the workspace (a later run finds them), distinct per file even
    when long names share their first characters."""
    short = name
    if len(name) > _KEPT:
        short = f"{name[: _KEPT - 9]}~{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    temp = f".{short}.jarvis-{ws_id}"
    return temp, f"{temp}.orig"


def journal_dir(state_dir: Path) -> Path:
    return state_dir / "code-apply"


def pending(state_dir: Path) -> list[Path]:
    """The journals of interrupted applies (a half-written ``.part`` is removed: the
    journal it was replacing, if any, is still whole)."""
    folder = journal_dir(state_dir)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    for name in names:
        if name.endswith(".json.part"):
            with contextlib.suppress(OSError):
                os.unlink(folder / name)
    return sorted(folder / n for n in names if n.endswith(".json"))


def fsync_dir(path: Path | int) -> None:
    """Make a directory's entries durable (a rename is not, until its directory is)."""
    fd = (
        os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if isinstance(path, Path)
        else path
    )
    try:
        os.fsync(fd)
    finally:
        if isinstance(path, Path):
            os.close(fd)


@contextlib.contextmanager
def locked(
    state_dir: Path, *, wait_s: float, check: Callable[[], None] | None = None
) -> Iterator[bool]:
    """Hold the apply lock (an flock, released by the kernel when its holder dies);
    yields False when another process still holds it after ``wait_s`` seconds.
    ``check`` runs while waiting (it raises to stop the wait)."""
    folder = journal_dir(state_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise WorkspaceError(f"cannot open the apply lock in {folder}: {exc.strerror}") from exc
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                if check is not None:
                    check()
                time.sleep(0.05)
        yield True
    finally:
        os.close(fd)
