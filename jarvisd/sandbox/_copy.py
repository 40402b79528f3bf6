"""Copying a tree for the sandbox (a `jarvis code` workspace, an external agent's copy
of a private workspace), leaving out what must not reach the sandbox.

The walk goes through directory descriptors opened with ``O_NOFOLLOW`` and looks at
every entry with ``lstat`` (``fstatat`` without following): a symlink is copied as a
link (its target is only a string, resolved inside the sandbox), never followed out of
the tree; sockets, FIFOs and devices are left out; a file swapped for something else
between the look and the open is caught by ``fstat`` on what was opened. Names are
used only relative to their directory's descriptor, so no name, however odd, can
lead anywhere else.

Left out, and listed (never an error): names the sandbox blocks (``.env*``, keys,
credentials: ``jarvisd.sandbox.BLOCKED_PATTERNS``), virtual environments (a directory
holding ``pyvenv.cfg``: host-specific and of no use in the sandbox), nested ``.git``
directories, special files, and what cannot be read.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

__all__ = ["MAX_LISTED", "CopyReport", "LeftOut", "NameFilter", "copy_tree"]

#: How many left-out entries a report lists (the rest are counted).
MAX_LISTED = 1000
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 30


@dataclass(frozen=True, slots=True)
class LeftOut:
    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclass(slots=True)
class CopyReport:
    files: int = 0
    left_out: list[LeftOut] = field(default_factory=list)
    #: Entries left out beyond MAX_LISTED (counted, not listed).
    more_left_out: int = 0
    #: Every path left out (what a change must never touch).
    all_left_out: list[str] = field(default_factory=list)

    def leave_out(self, path: str, reason: str) -> None:
        self.all_left_out.append(path)
        if len(self.left_out) < MAX_LISTED:
            self.left_out.append(LeftOut(path, reason))
        else:
            self.more_left_out += 1


class NameFilter:
    """The blocked-name patterns, compiled once: matched case-insensitively against a
    path's last component, or its last few for patterns such as ``.config/gcloud``."""

    def __init__(self, patterns: Sequence[str]) -> None:
        single = [p for p in patterns if "/" not in p]
        self._single = [(p, re.compile(fnmatch.translate(p.lower()))) for p in single]
        joined = "|".join(f"(?:{fnmatch.translate(p.lower())})" for p in single)
        self._any = re.compile(joined or r"(?!)")
        self._multi = [
            (p, p.count("/") + 1, [re.compile(fnmatch.translate(s.lower())) for s in p.split("/")])
            for p in patterns
            if "/" in p
        ]
        # A multi-component pattern can only match when its last piece matches the name.
        lasts = "|".join(
            f"(?:{fnmatch.translate(p.rsplit('/', 1)[1].lower())})" for p, _n, _rx in self._multi
        )
        self._any_last = re.compile(lasts or r"(?!)")

    def match(self, parts: Sequence[str]) -> str | None:
        """The pattern the path ending in ``parts[-1]`` matches, or None."""
        last = parts[-1].lower()
        if self._any.match(last):
            return next(p for p, rx in self._single if rx.match(last))
        if not self._any_last.match(last):
            return None
        for pattern, n, pieces in self._multi:
            if len(parts) >= n and all(
                rx.match(part.lower()) for rx, part in zip(pieces, parts[-n:], strict=True)
            ):
                return pattern
        return None


def _special(mode: int) -> str:
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _wanted_dirs(only: Iterable[str]) -> set[str]:
    dirs: set[str] = set()
    for path in only:
        parts = path.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    return dirs


#: Directory levels the copy descends; deeper ones are left out (two descriptors a level).
MAX_DEPTH = 256


def copy_tree(
    source: str,
    target: str,
    names: NameFilter,
    *,
    only: set[str] | None = None,
    owner: tuple[int, int] | None = None,
) -> CopyReport:
    """Copy the directory ``source`` into the existing, empty directory ``target``.

    ``only``: the relative paths to copy (a git repository's tracked and untracked,
    not ignored files); None copies everything. ``owner``: (uid, gid) to give every
    copy (the sandbox user, when jarvis runs as root). Copies are made writable by
    their group, which model-written code shares in the sandbox. Depth first, so the
    descriptors held are two per level, however wide the tree."""
    report = CopyReport()
    wanted = None if only is None else _wanted_dirs(only)
    src_top = os.open(source, _DIR)
    try:
        dst_top = os.open(target, _DIR)
    except BaseException:
        os.close(src_top)
        raise
    # One (source dir fd, target dir fd, relative path, names left) per level.
    stack: list[tuple[int, int, str, Iterator[str]]] = []
    try:
        stack.append((src_top, dst_top, "", iter(_listing(src_top, "", report))))
        while stack:
            src_fd, dst_fd, rel, pending = stack[-1]
            name = next(pending, None)
            if name is None:
                stack.pop()
                os.close(src_fd)
                os.close(dst_fd)
                continue
            entered = _copy_entry(src_fd, dst_fd, rel, name, names, only, wanted, owner, report)
            if entered is None:
                continue
            child_src, child_dst, path = entered
            if len(stack) >= MAX_DEPTH:
                os.close(child_src)
                os.close(child_dst)
                report.leave_out(path, f"nested more than {MAX_DEPTH} directories deep")
                continue
            stack.append((child_src, child_dst, path, iter(())))
            stack[-1] = (child_src, child_dst, path, iter(_listing(child_src, path, report)))
    finally:
        for src_fd, dst_fd, _rel, _pending in stack:
            os.close(src_fd)
            os.close(dst_fd)
    return report


def _listing(src_fd: int, rel: str, report: CopyReport) -> list[str]:
    try:
        with os.scandir(src_fd) as listing:
            return sorted(e.name for e in listing)
    except OSError as exc:
        report.leave_out(rel or ".", f"unreadable ({exc.strerror})")
        return []


def _copy_entry(
    src_fd: int,
    dst_fd: int,
    rel: str,
    name: str,
    names: NameFilter,
    only: set[str] | None,
    wanted: set[str] | None,
    owner: tuple[int, int] | None,
    report: CopyReport,
) -> tuple[int, int, str] | None:
    """Copy one entry; for a directory to enter, its (source fd, target fd, path)."""
    path = f"{rel}/{name}" if rel else name
    if name == ".git":
        if rel:
            report.leave_out(path, "git metadata of a nested repository")
        return None
    listed = only is None or path in only
    if not listed and (wanted is None or path not in wanted):
        return None  # ignored by git: never part of the repository's worktree
    pattern = names.match(path.split("/"))
    if pattern is not None:
        report.leave_out(path, f"blocked name ({pattern})")
        return None
    try:
        mode = os.stat(name, dir_fd=src_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None  # gone since the listing
    except OSError as exc:
        report.leave_out(path, f"unreadable ({exc.strerror})")
        return None
    if stat.S_ISDIR(mode):
        if only is not None and path in only:
            report.leave_out(path, "a submodule")
            return None
        return _enter(src_fd, dst_fd, name, path, mode, owner, report)
    if stat.S_ISREG(mode):
        _copy_file(src_fd, dst_fd, name, path, owner, report)
    elif stat.S_ISLNK(mode):
        try:
            link = os.readlink(name, dir_fd=src_fd)
            os.symlink(link, name, dir_fd=dst_fd)
        except OSError as exc:
            report.leave_out(path, f"unreadable link ({exc.strerror})")
            return None
        if owner is not None:
            os.chown(name, *owner, dir_fd=dst_fd, follow_symlinks=False)
        report.files += 1
    else:
        report.leave_out(path, _special(mode))
    return None


def _enter(
    src_fd: int,
    dst_fd: int,
    name: str,
    path: str,
    mode: int,
    owner: tuple[int, int] | None,
    report: CopyReport,
) -> tuple[int, int, str] | None:
    try:
        child = os.open(name, _DIR, dir_fd=src_fd)
    except OSError as exc:
        report.leave_out(path, f"unreadable ({exc.strerror})")
        return None
    try:
        os.stat("pyvenv.cfg", dir_fd=child, follow_symlinks=False)
    except FileNotFoundError:
        pass
    except OSError:
        pass
    else:
        os.close(child)
        report.leave_out(path, "a virtual environment")
        return None
    try:
        os.mkdir(name, (mode & 0o777) | 0o770, dir_fd=dst_fd)
        target = os.open(name, _DIR, dir_fd=dst_fd)
    except BaseException:
        os.close(child)
        raise
    os.fchmod(target, (mode & 0o777) | 0o770)  # past the umask
    if owner is not None:
        os.fchown(target, *owner)
    return child, target, path


def _copy_file(
    src_fd: int,
    dst_fd: int,
    name: str,
    path: str,
    owner: tuple[int, int] | None,
    report: CopyReport,
) -> None:
    # O_NONBLOCK: a file swapped for a FIFO since the look must not block the open.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=src_fd)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            report.leave_out(path, f"unreadable ({exc.strerror})")
        return
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            report.leave_out(path, _special(info.st_mode))
            return
        mode = (info.st_mode & 0o777) | 0o660
        out = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            mode,
            dir_fd=dst_fd,
        )
        try:
            offset = 0
            while sent := os.sendfile(out, fd, offset, _CHUNK):
                offset += sent
            os.fchmod(out, mode)
            if owner is not None:
                os.fchown(out, *owner)
        finally:
            os.close(out)
        report.files += 1
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dst_fd)
        report.leave_out(path, f"could not be copied ({exc.strerror})")
    finally:
        os.close(fd)
