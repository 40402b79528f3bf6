"""Applying a workspace's change onto the project: a three-way merge, all or nothing.

For every file the change touches, the merge has three versions: ``base`` (the file
when the workspace was made), the project's file now, and the agent's ``result``. When
the project's file is still the base, the result replaces it; when it already equals
the result, nothing is done; when both changed a text file, ``git merge-file`` merges
them, and any conflict refuses the whole apply. Nothing is written through a symlink:
directories are walked with ``O_NOFOLLOW``.

Writing is crash-safe. Under a lock, an intent journal is written first
(``_journal``); then every new content goes to a temporary beside its target, fsynced,
and every replaced file gets a hard-link backup (``_steps.stage``); the journal then
says "committed", and only then are the temporaries renamed into place. A failure or a
signal before that point rolls everything back, temporaries and new directories
included; a kill at any point is completed or rolled back by the next ``jarvis code``
command (``_recover``). The workspace is recorded as applied only after the commit.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .._errors import WorkspaceError
from ._git import Git, git_output
from ._journal import (
    COMMITTED,
    PREPARED,
    ROLLING_BACK,
    Entry,
    Journal,
    content_hash,
    journal_dir,
    locked,
    side_names,
)
from ._recover import finish, recover_locked
from ._signals import ApplyInterrupted, SignalGuard
from ._steps import DIR_FLAGS, missing_dirs, roll_back, roll_forward, stage, walk_parent
from ._store import CodeStore, Workspace

__all__ = ["apply"]

log = logging.getLogger(__name__)

#: Seconds an apply waits for another one to end.
_LOCK_WAIT_S = 30.0
_FORBIDDEN = {"", ".", "..", ".git"}
#: How many conflicting files a refusal names.
_NAMED = 10


@dataclass(frozen=True, slots=True)
class _Version:
    """A file's content and git mode ("100644", "100755", "120000"); None: absent."""

    data: bytes
    mode: str


@dataclass(slots=True)
class _Write:
    path: str
    content: _Version | None  # None: delete
    keep_mode: int | None  # the project file's permission bits, when it exists
    exists: bool  # whether the project has the file (or a symlink) now


def _blobs(git: Git, commit: str, paths: set[str]) -> dict[str, _Version]:
    """The blobs at ``paths`` in ``commit`` (a path that is absent, or not a blob, is
    left out): one ls-tree and one cat-file for the whole change."""
    wanted: dict[str, tuple[str, str]] = {}
    for line in git.run("ls-tree", "-r", "-z", "--full-tree", commit).split(b"\0"):
        meta, _, name = line.partition(b"\t")
        path = os.fsdecode(name)
        if path in paths:
            mode, kind, sha = meta.decode().split()
            if kind == "blob":
                wanted[path] = (mode, sha)
    shas = list(dict.fromkeys(sha for _, sha in wanted.values()))
    data: dict[str, bytes] = {}
    if shas:
        out = git.run("cat-file", "--batch", stdin="".join(f"{s}\n" for s in shas).encode())
        pos = 0
        while pos < len(out):  # "<sha> <type> <size>\n<content>\n" per object
            end = out.index(b"\n", pos)
            header = out[pos:end].decode().split()
            if len(header) != 3:
                raise WorkspaceError(f"git cat-file said {out[pos:end][:200]!r}")
            size = int(header[2])
            data[header[0]] = out[end + 1 : end + 1 + size]
            pos = end + 2 + size
    return {path: _Version(data[sha], mode) for path, (mode, sha) in wanted.items()}


def _current(root_fd: int, path: str) -> tuple[_Version | None, int | None]:
    """The project's file at ``path`` now (content, git mode) and its permission bits."""
    parent = walk_parent(root_fd, path, create=False)
    if parent is None:
        return None, None
    name = path.rsplit("/", 1)[-1]
    try:
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None, None
        if stat.S_ISLNK(info.st_mode):
            return _Version(os.fsencode(os.readlink(name, dir_fd=parent)), "120000"), None
        if not stat.S_ISREG(info.st_mode):
            raise WorkspaceError(f"{path} in the project is no longer a regular file")
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent
        )
        with os.fdopen(fd, "rb") as handle:
            data = handle.read()
        mode = "100755" if info.st_mode & 0o100 else "100644"
        return _Version(data, mode), stat.S_IMODE(info.st_mode)
    finally:
        os.close(parent)


def _merge(path: str, base: _Version, ours: _Version, theirs: _Version) -> bytes | None:
    """The three-way merge of one text file, or None on a conflict."""
    if "120000" in (base.mode, ours.mode, theirs.mode):
        return None
    with tempfile.TemporaryDirectory(prefix="jarvis-merge-") as tmp:
        files = []
        for name, version in (("ours", ours), ("base", base), ("theirs", theirs)):
            file = Path(tmp) / name
            file.write_bytes(version.data)
            files.append(str(file))
        done = git_output(["merge-file", "-p", *files], check=False)
    if done.returncode != 0:  # the number of conflicts, or an error (a binary file)
        return None
    return done.stdout


def _plan(
    ws: Workspace, git: Git, result: str, root_fd: int, check: Callable[[], None]
) -> list[_Write]:
    names = git.run("diff", "--name-only", "-z", "--no-renames", ws.base, result)
    writes: list[_Write] = []
    conflicts: list[str] = []
    paths = [os.fsdecode(raw) for raw in names.split(b"\0") if raw]
    for path in paths:
        if any(part.lower() in _FORBIDDEN for part in path.split("/")):
            raise WorkspaceError(f"refused: the change names the path {path!r}")
    bases, results = _blobs(git, ws.base, set(paths)), _blobs(git, result, set(paths))
    for path in paths:
        check()
        base, theirs = bases.get(path), results.get(path)
        ours, keep_mode = _current(root_fd, path)
        if ours == base:
            writes.append(_Write(path, theirs, keep_mode, ours is not None))
        elif ours == theirs:
            continue  # the project has this change already
        elif base is not None and ours is not None and theirs is not None:
            merged = _merge(path, base, ours, theirs)
            if merged is None:
                conflicts.append(path)
            else:
                writes.append(_Write(path, _Version(merged, theirs.mode), keep_mode, True))
        else:
            conflicts.append(path)
    if conflicts:
        named = ", ".join(conflicts[:_NAMED])
        more = f" and {len(conflicts) - _NAMED} more" if len(conflicts) > _NAMED else ""
        raise WorkspaceError(
            f"not applied: {ws.source} changed since workspace {ws.id} was made, in a way "
            f"that conflicts with the agent's change ({named}{more}); nothing was written. "
            f"Review with `jarvis code show {ws.id}`, or discard it"
        )
    return writes


def _file_mode(write: _Write) -> int:
    assert write.content is not None
    executable = write.content.mode == "100755"
    if write.keep_mode is not None:
        mode = write.keep_mode
        return mode | 0o111 & ~_umask() if executable else mode & ~0o111
    return (0o777 if executable else 0o666) & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _journal(ws: Workspace, root_fd: int, writes: list[_Write]) -> Journal:
    entries = []
    for write in writes:
        name = write.path.rpartition("/")[2]
        temp, backup = side_names(name, ws.id)
        content = write.content
        entries.append(
            Entry(
                path=write.path,
                temp=None if content is None else temp,
                backup=backup,
                existed=write.exists,
                sha256=None if content is None else content_hash(content.data),
            )
        )
    made = missing_dirs(root_fd, (w.path for w in writes if w.content is not None))
    return Journal(ws.id, ws.source, entries, made)


def _contents(writes: list[_Write]) -> dict[str, tuple[bytes, bool, int]]:
    return {
        w.path: (w.content.data, w.content.mode == "120000", _file_mode(w))
        for w in writes
        if w.content is not None
    }


def apply(ref: str, store: CodeStore, state_dir: Path) -> Workspace:
    """Merge workspace ``ref``'s change onto its project, then remove the workspace
    (its record stays, state "applied"). WorkspaceError, with the project as it was,
    when it cannot; ApplyInterrupted when SIGINT, SIGTERM or SIGHUP came before the
    commit point (after it, the apply completes)."""
    with (
        SignalGuard() as signals,
        locked(state_dir, wait_s=_LOCK_WAIT_S, check=signals.check) as held,
    ):
        if not held:
            raise WorkspaceError(
                f"another `jarvis code apply` still runs after {_LOCK_WAIT_S:.0f} s "
                f"(it holds {journal_dir(state_dir) / 'lock'}); try again when it ends"
            )
        said, unresolved = recover_locked(store, state_dir)
        for line in said:
            log.warning("%s", line)
        ws = store.get(ref)
        if unresolved & {"", ws.source}:  # another project's trouble is no reason to stop
            raise WorkspaceError(
                f"not applied: an interrupted apply into {ws.source} could not be finished "
                f"first ({said[-1]})"
            )
        return _apply_locked(ws, store, state_dir, signals)


def _apply_locked(
    ws: Workspace, store: CodeStore, state_dir: Path, signals: SignalGuard
) -> Workspace:
    if ws.state == "applied":
        raise WorkspaceError(
            f"workspace {ws.id} was applied already: its change is in {ws.source} "
            f"(see `jarvis code show {ws.id}`); there is nothing left to apply"
        )
    if ws.state not in ("done", "failed"):
        raise WorkspaceError(
            f"workspace {ws.id} is {ws.state}: only a workspace whose agent has run can be applied"
        )
    result = str(ws.outcome.get("result") or "")
    if not result or result == ws.base:
        raise WorkspaceError(f"workspace {ws.id} holds no change to apply")
    git = Git(Path(ws.git_dir))
    try:
        root_fd = os.open(ws.source, DIR_FLAGS)
    except OSError as exc:
        raise WorkspaceError(f"cannot open the project {ws.source}: {exc.strerror}") from exc
    try:
        try:
            writes = _plan(ws, git, result, root_fd, signals.check)
        except Exception as exc:
            if signals.received is None:
                raise
            # (a git child killed by the same Ctrl-C fails: the signal is the cause)
            raise ApplyInterrupted(
                f"not applied: interrupted by {signals.name}; nothing was written"
            ) from exc
        journal = _journal(ws, root_fd, writes)
        try:
            journal.save(state_dir)  # before anything in the project changes
        except OSError as exc:
            raise WorkspaceError(
                f"not applied: cannot write the apply journal in {journal_dir(state_dir)} "
                f"({exc.strerror}); nothing was written"
            ) from exc
        try:
            stage(root_fd, journal, _contents(writes), signals.check)
            signals.check()
            journal.phase = COMMITTED
            journal.save(state_dir)
        except BaseException as exc:
            journal.phase = PREPARED
            _undo(root_fd, journal, state_dir, ws, exc, signals)
            raise  # _undo raised unless the error is one of ours
        # The commit point: from here on signals wait, and a kill is rolled forward.
        try:
            roll_forward(root_fd, journal)
        except OSError as exc:
            _undo_after_commit(root_fd, journal, state_dir, ws, exc, signals)
            raise
    finally:
        os.close(root_fd)
    finish(journal, store, state_dir)
    return store.get(ws.id)


def _undo(
    root_fd: int,
    journal: Journal,
    state_dir: Path,
    ws: Workspace,
    exc: BaseException,
    signals: SignalGuard,
) -> None:
    """Roll back a failed or interrupted apply, then raise the error that says so."""
    try:
        left = roll_back(root_fd, journal)
        journal.remove(state_dir)
    except OSError as again:
        raise WorkspaceError(
            f"not applied: {_why(exc, signals)}, and undoing it failed too ({again.strerror}); "
            f"the next `jarvis code` command finishes putting {ws.source} back"
        ) from exc
    kept = (
        f" (the directories {', '.join(left)} now hold other files and were kept)" if left else ""
    )
    done = (
        f"every file was put back as it was, and every temporary file and new "
        f"directory removed{kept}"
    )
    if isinstance(exc, ApplyInterrupted) or signals.received is not None:
        raise ApplyInterrupted(f"not applied: {_why(exc, signals)}; {done}") from exc
    if isinstance(exc, OSError):
        raise WorkspaceError(f"not applied: {_why(exc, signals)}; {done}") from exc
    if isinstance(exc, WorkspaceError):
        raise WorkspaceError(f"not applied: {exc}; {done}") from exc


def _undo_after_commit(
    root_fd: int,
    journal: Journal,
    state_dir: Path,
    ws: Workspace,
    exc: OSError,
    signals: SignalGuard,
) -> None:
    """A rename failed after the commit point: roll back from the backups. The journal
    says so first, so a kill meanwhile rolls back too, not forward."""
    journal.phase = ROLLING_BACK
    try:
        journal.save(state_dir)
    except OSError:
        pass  # still undone below; only a kill in the next instant would roll forward
    _undo(root_fd, journal, state_dir, ws, exc, signals)


def _why(exc: BaseException, signals: SignalGuard) -> str:
    if signals.received is not None:
        return f"interrupted by {signals.name}"
    if isinstance(exc, OSError):
        return f"writing into the project failed ({exc.strerror})"
    return str(exc)
