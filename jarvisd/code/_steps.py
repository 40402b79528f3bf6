"""The steps of an apply on the project's files, each safe to repeat after a crash.

In a fixed order: ``stage`` creates the journal's directories, writes every temporary
(fsynced) and links every backup; the journal then says ``committed``; ``roll_forward``
renames the temporaries over their targets, removes deleted files, then the backups.
``roll_back`` undoes whatever of this is on disk, in any phase. Both read only the
journal and the disk, so the process that runs them need not be the one that started.
Every path is reached from the project's descriptor without following a symlink.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterable, Iterator

from .._errors import WorkspaceError
from ._journal import PREPARED, Journal, content_hash, fsync_dir

__all__ = ["DIR_FLAGS", "missing_dirs", "roll_back", "roll_forward", "stage", "walk_parent"]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def walk_parent(root_fd: int, path: str, create: bool) -> int | None:
    """A descriptor on the directory holding ``path`` below the project, reached
    without following a symlink; None when a directory on the way does not exist (and
    ``create`` is false). WorkspaceError when a component is a link or not a directory."""
    parts = path.split("/")
    fd = os.dup(root_fd)
    try:
        for i, name in enumerate(parts[:-1]):
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                os.mkdir(name, 0o777, dir_fd=fd)
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
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


def missing_dirs(root_fd: int, paths: Iterable[str]) -> list[str]:
    """The directories writing ``paths`` would create, parents first."""
    missing: set[str] = set()
    for path in paths:
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            here = "/".join(parts[:depth])
            if here in missing:
                continue
            parent = walk_parent(root_fd, here + "/x", create=False)
            if parent is None:  # an ancestor is missing: it is in the set already
                missing.add(here)
            else:
                os.close(parent)
    return sorted(missing, key=lambda d: (d.count("/"), d))


def _exists(name: str, parent: int) -> bool:
    try:
        os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


@contextlib.contextmanager
def _parents(root_fd: int, journal: Journal, create: bool) -> Iterator[dict[str, int | None]]:
    """A descriptor per entry's directory (None: it does not exist), closed at the end;
    with ``create``, after every directory was fsynced."""
    opened: dict[str, int | None] = {}
    try:
        for entry in journal.entries:
            folder = entry.path.rpartition("/")[0]
            if folder not in opened:
                opened[folder] = walk_parent(root_fd, entry.path, create)
        yield opened
        for fd in opened.values():
            if fd is not None and create:
                fsync_dir(fd)
    finally:
        for fd in opened.values():
            if fd is not None:
                os.close(fd)


def _folder(path: str) -> str:
    return path.rpartition("/")[0]


def stage(
    root_fd: int,
    journal: Journal,
    contents: dict[str, tuple[bytes, bool, int]],
    check: Callable[[], None],
) -> None:
    """Create the directories, write every temporary (``contents``: path -> data, is a
    symlink, file mode) and fsync it, link every backup. The project's files are not
    touched; ``check`` runs between files (it raises to stop)."""
    with _parents(root_fd, journal, create=True) as parents:
        for entry in journal.entries:
            check()
            parent = parents[_folder(entry.path)]
            assert parent is not None
            if entry.temp is not None:
                data, is_link, mode = contents[entry.path]
                _write_temp(parent, entry.temp, data, is_link, mode)
            if entry.existed:
                name = entry.path.rpartition("/")[2]
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.backup, dir_fd=parent)
                os.link(
                    name, entry.backup, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False
                )


def _write_temp(parent: int, temp: str, data: bytes, is_link: bool, mode: int) -> None:
    with contextlib.suppress(FileNotFoundError):  # left by a run that was killed
        os.unlink(temp, dir_fd=parent)
    if is_link:
        os.symlink(os.fsdecode(data), temp, dir_fd=parent)
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, 0o600, dir_fd=parent)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)


def roll_forward(root_fd: int, journal: Journal) -> None:
    """Put every new file in place and remove every deleted one, then the backups.
    Repeatable: a temporary that is gone was renamed already."""
    with _parents(root_fd, journal, create=False) as parents:
        for entry in journal.entries:
            parent = parents[_folder(entry.path)]
            if parent is None:
                raise WorkspaceError(f"the directory of {entry.path} disappeared from the project")
            name = entry.path.rpartition("/")[2]
            if entry.temp is not None:
                if _exists(entry.temp, parent):
                    os.replace(entry.temp, name, src_dir_fd=parent, dst_dir_fd=parent)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=parent)
        for fd in parents.values():
            if fd is not None:
                fsync_dir(fd)  # the renames are durable before the backups go
        for entry in journal.entries:
            parent = parents[_folder(entry.path)]
            if entry.existed and parent is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.backup, dir_fd=parent)


def roll_back(root_fd: int, journal: Journal) -> list[str]:
    """Put every replaced or deleted file back from its backup, remove every temporary,
    every new file and every directory the apply created. Repeatable. Returns what
    could not be removed (a directory someone else filled meanwhile)."""
    left: list[str] = []
    with _parents(root_fd, journal, create=False) as parents:
        for entry in journal.entries:
            parent = parents[_folder(entry.path)]
            if parent is None:
                continue  # its directory was never made: nothing of it exists
            name = entry.path.rpartition("/")[2]
            if entry.temp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.temp, dir_fd=parent)
            if entry.existed:
                if _exists(entry.backup, parent):
                    # Before the commit point the backup and the file are one inode and
                    # this is a no-op; after it, it puts the old file back.
                    os.replace(entry.backup, name, src_dir_fd=parent, dst_dir_fd=parent)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.backup, dir_fd=parent)
            elif journal.phase != PREPARED and _holds(parent, name, entry.sha256):
                os.unlink(name, dir_fd=parent)  # a new file the apply had put in place
        for fd in parents.values():
            if fd is not None:
                fsync_dir(fd)
    for folder in reversed(journal.dirs):
        parent = walk_parent(root_fd, folder + "/x", create=False)
        if parent is None:
            continue
        os.close(parent)
        up = walk_parent(root_fd, folder, create=False)
        if up is None:
            continue
        try:
            os.rmdir(folder.rpartition("/")[2], dir_fd=up)
            fsync_dir(up)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            left.append(folder)
        finally:
            os.close(up)
    return left


def _holds(parent: int, name: str, sha256: str | None) -> bool:
    """Whether the file ``name`` holds the content the apply wrote (a file someone
    else put there since is left alone)."""
    try:
        if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            data = os.fsencode(os.readlink(name, dir_fd=parent))
        else:
            fd = os.open(
                name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent
            )
            with os.fdopen(fd, "rb") as handle:
                data = handle.read()
    except FileNotFoundError:
        return False
    return content_hash(data) == sha256
