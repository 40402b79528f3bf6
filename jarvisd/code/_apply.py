"""Applying a workspace's change onto the project: a three-way merge, all or nothing.

For every file the change touches, the merge has three versions: ``base`` (the file
when the workspace was made), the project's file now, and the agent's ``result``. When
the project's file is still the base, the result replaces it; when it already equals
the result, nothing is done; when both changed a text file, ``git merge-file`` merges
them, and any conflict refuses the whole apply. Every new content is written to a
temporary file beside its target first; only when all are ready are they renamed into
place (each rename is atomic), with the replaced files kept as hard links until the
end, so a failure half way puts every file back. Nothing is written through a symlink:
directories are walked with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from .._errors import WorkspaceError
from ._git import Git, git_output
from ._store import CodeStore, Workspace
from ._workspace import discard

__all__ = ["apply"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
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


def _blob(git: Git, commit: str, path: str) -> _Version | None:
    # A literal path (git runs with GIT_LITERAL_PATHSPECS): a file named ":/x" is that
    # file, never the pathspec "x at the top".
    line = git.run("ls-tree", "-z", "--full-tree", commit, "--", path).split(b"\0")[0]
    if not line:
        return None
    meta, _, _name = line.partition(b"\t")
    mode, kind, sha = meta.decode().split()
    if kind != "blob":
        return None
    return _Version(git.run("cat-file", "blob", sha), mode)


def _walk_parent(root_fd: int, path: str, create: bool) -> int | None:
    """A descriptor on the directory holding ``path`` below the project, reached
    without following a symlink; None when a directory on the way does not exist (and
    ``create`` is false). WorkspaceError when a component is a link or not a directory."""
    parts = path.split("/")
    fd = os.dup(root_fd)
    try:
        for i, name in enumerate(parts[:-1]):
            try:
                child = os.open(name, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                os.mkdir(name, 0o777, dir_fd=fd)
                child = os.open(name, _DIR, dir_fd=fd)
            except OSError as exc:
                raise WorkspaceError(
                    f"{'/'.join(parts[: i + 1])} in the project is not a directory reached "
                    f"without a symlink ({exc.strerror}): refused to write {path} there"
                ) from exc
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _current(root_fd: int, path: str) -> tuple[_Version | None, int | None]:
    """The project's file at ``path`` now (content, git mode) and its permission bits."""
    parent = _walk_parent(root_fd, path, create=False)
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
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=parent)  # fmt: skip
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


def _plan(ws: Workspace, git: Git, result: str, root_fd: int) -> list[_Write]:
    names = git.run("diff", "--name-only", "-z", "--no-renames", ws.base, result)
    writes: list[_Write] = []
    conflicts: list[str] = []
    for raw in names.split(b"\0"):
        if not raw:
            continue
        path = os.fsdecode(raw)
        if any(part.lower() in _FORBIDDEN for part in path.split("/")):
            raise WorkspaceError(f"refused: the change names the path {path!r}")
        base, theirs = _blob(git, ws.base, path), _blob(git, result, path)
        ours, keep_mode = _current(root_fd, path)
        if ours == base:
            writes.append(_Write(path, theirs, keep_mode))
        elif ours == theirs:
            continue  # the project has this change already
        elif base is not None and ours is not None and theirs is not None:
            merged = _merge(path, base, ours, theirs)
            if merged is None:
                conflicts.append(path)
            else:
                writes.append(_Write(path, _Version(merged, theirs.mode), keep_mode))
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


def _commit_writes(root_fd: int, writes: list[_Write]) -> None:
    """Stage every write beside its target, then rename them all into place; on any
    failure, put back what was replaced and remove what was added."""
    tag = uuid.uuid4().hex[:8]
    staged: list[tuple[int, str, str | None]] = []  # (dir fd, name, temp name or None)
    done: list[tuple[int, str, str | None]] = []  # (dir fd, name, backup name or None)
    try:
        for write in writes:
            parent = _walk_parent(root_fd, write.path, create=write.content is not None)
            if parent is None:  # deleting a file whose directory is gone already
                continue
            name = write.path.rsplit("/", 1)[-1]
            temp = None
            if write.content is not None:
                temp = f".{name[:100]}.jarvis-{tag}"
                if write.content.mode == "120000":
                    os.symlink(os.fsdecode(write.content.data), temp, dir_fd=parent)
                else:
                    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                                 | os.O_CLOEXEC, 0o600, dir_fd=parent)  # fmt: skip
                    with os.fdopen(fd, "wb") as handle:
                        handle.write(write.content.data)
                        os.fchmod(handle.fileno(), _file_mode(write))
            staged.append((parent, name, temp))
        for parent, name, temp in staged:
            backup: str | None = f".{name[:100]}.jarvis-{tag}.orig"
            try:
                os.link(name, f".{name[:100]}.jarvis-{tag}.orig", src_dir_fd=parent,
                        dst_dir_fd=parent, follow_symlinks=False)  # fmt: skip
            except FileNotFoundError:
                backup = None
            done.append((parent, name, backup))
            if temp is None:
                os.unlink(name, dir_fd=parent)
            else:
                os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        for parent, name, backup in reversed(done):
            with contextlib.suppress(OSError):
                if backup is None:
                    os.unlink(name, dir_fd=parent)
                else:
                    os.replace(backup, name, src_dir_fd=parent, dst_dir_fd=parent)
        for parent, _name, temp in staged:
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=parent)
        raise
    finally:
        for parent, _name, backup in done:
            if backup is not None:
                with contextlib.suppress(OSError):
                    os.unlink(backup, dir_fd=parent)
        for parent, _name, _temp in staged:
            os.close(parent)


def apply(ref: str, store: CodeStore, state_dir: Path) -> Workspace:
    """Merge workspace ``ref``'s change onto its project, then remove the workspace
    (its record stays, state "applied"). WorkspaceError, with nothing written, when
    it cannot."""
    ws = store.get(ref)
    if ws.state not in ("done", "failed"):
        raise WorkspaceError(
            f"workspace {ws.id} is {ws.state}: only a workspace whose agent has run can be applied"
        )
    result = str(ws.outcome.get("result") or "")
    if not result or result == ws.base:
        raise WorkspaceError(f"workspace {ws.id} holds no change to apply")
    git = Git(Path(ws.git_dir))
    try:
        root_fd = os.open(ws.source, _DIR)
    except OSError as exc:
        raise WorkspaceError(f"cannot open the project {ws.source}: {exc.strerror}") from exc
    try:
        writes = _plan(ws, git, result, root_fd)
        try:
            _commit_writes(root_fd, writes)
        except OSError as exc:
            raise WorkspaceError(
                f"not applied: writing into {ws.source} failed ({exc.strerror}); every file "
                "was put back as it was"
            ) from exc
    finally:
        os.close(root_fd)
    applied = store.update(ws, state="applied")
    discard(applied, store, state_dir, forget=False)
    return applied
