"""Mounts as archives, for an engine that cannot see this machine's files (``_transfer``).

:class:`Packer` writes one tar of what a run needs (its checked mounts, jarvis's code, its
input files) to a temporary file, bounded in bytes and files. A mount's tree is walked
through descriptors that follow no symlink (a link travels as a link, resolved inside),
special files are left out, and so is every name the sandbox blocks (``.env*``, keys:
``BLOCKED_PATTERNS``); before the tar is handed over, its member list is read back and
checked again, so a blocked name that got in by any route stops the run there.

:func:`write_back` brings a ``:rw`` mount's tree back from the engine. The sandbox made
that tree, so the archive is hostile: it is spooled (bounded), every member checked
before anything is written (no absolute or ``..`` names, no member under a symlink
member, the byte and file bounds; devices and FIFOs are never made, a hard link becomes
a copy), then applied through
directory descriptors opened with ``O_NOFOLLOW`` from the checked mount, so no write
follows a link out of it. Blocked names are neither written nor deleted (the host's
``.env`` was never sent; the sandbox cannot replace it). What was sent and is no longer
there is deleted, as a bind mount would have shown it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

from .._errors import SandboxError
from ._copy import NameFilter

__all__ = ["ArchiveLimits", "Packer", "WriteBack", "write_back"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: A tar's own bytes besides the files' (headers, padding, end blocks), per member.
_OVERHEAD = 3 * 512


@dataclass(frozen=True, slots=True)
class ArchiveLimits:
    max_bytes: int
    max_files: int

    def too_many(self, what: str) -> SandboxError:
        return SandboxError(
            f"{what} holds more than {self.max_files} files (sandbox.archive_max_files): "
            "mount a narrower directory or raise the bound"
        )

    def too_large(self, what: str) -> SandboxError:
        return SandboxError(
            f"{what} holds more than {self.max_bytes} bytes (sandbox.archive_max_bytes): "
            "mount a narrower directory or raise the bound"
        )


class Packer:
    """One tar, written to a temporary file: :meth:`add_tree` and :meth:`add_dir` under
    top-level names, then :meth:`finish` for the file to send."""

    def __init__(self, limits: ArchiveLimits, names: NameFilter) -> None:
        self.limits = limits
        self.names = names
        # Closed by close() (the caller's finally): it outlives this call.
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="jarvis-ship-")  # noqa: SIM115
        self._tar = tarfile.open(  # noqa: SIM115
            fileobj=self._file, mode="w", format=tarfile.PAX_FORMAT
        )
        self._bytes = 0
        self._files = 0
        #: Top-level names whose trees went through the name filter.
        self._filtered: set[str] = set()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._tar.close()
        self._file.close()

    def _count(self, size: int) -> None:
        self._files += 1
        self._bytes += size
        if self._files > self.limits.max_files:
            raise self.limits.too_many("the archive of the run's mounts")
        if self._bytes > self.limits.max_bytes:
            raise self.limits.too_large("the archive of the run's mounts")

    def add_dir(self, name: str, owner: tuple[int, int], mode: int) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, mode
        info.uid, info.gid = owner
        self._count(0)
        self._tar.addfile(info)

    def add_tree(
        self, name: str, root_fd: int, owner: tuple[int, int] | None, *, filtered: bool
    ) -> set[str]:
        """The directory ``root_fd`` (any descriptor of it, ``O_PATH`` too) as ``name``;
        ``owner``: of every entry (None: each its own, as a bind shows them);
        ``filtered``: blocked names are left out. Returns the paths sent, relative."""
        sent: set[str] = set()
        if filtered:
            self._filtered.add(name)
        fd = os.open(".", _DIR, dir_fd=root_fd)
        try:
            info = os.fstat(fd)
            self.add_dir(name, owner or (info.st_uid, info.st_gid), stat.S_IMODE(info.st_mode))
            self._walk(fd, name, "", owner, filtered, sent)
        finally:
            os.close(fd)
        return sent

    def _walk(
        self,
        fd: int,
        top: str,
        rel: str,
        owner: tuple[int, int] | None,
        filtered: bool,
        sent: set[str],
    ) -> None:
        with os.scandir(fd) as listing:
            entries = sorted(listing, key=lambda e: e.name)
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            if filtered and self.names.match(path.split("/")):
                continue  # never leaves the host
            info = entry.stat(follow_symlinks=False)
            member = tarfile.TarInfo(f"{top}/{path}")
            member.uid, member.gid = owner or (info.st_uid, info.st_gid)
            member.mtime = int(info.st_mtime)
            member.mode = stat.S_IMODE(info.st_mode) & 0o777
            if stat.S_ISLNK(info.st_mode):
                member.type, member.linkname = tarfile.SYMTYPE, os.readlink(entry.name, dir_fd=fd)
                self._count(0)
                self._tar.addfile(member)
            elif stat.S_ISDIR(info.st_mode):
                member.type = tarfile.DIRTYPE
                self._count(0)
                self._tar.addfile(member)
                child = os.open(entry.name, _DIR, dir_fd=fd)
                try:
                    self._walk(child, top, path, owner, filtered, sent)
                finally:
                    os.close(child)
            elif stat.S_ISREG(info.st_mode):
                self._add_file(fd, entry.name, member)
            else:
                continue  # sockets, FIFOs, devices: never sent
            sent.add(path)

    def _add_file(self, dir_fd: int, name: str, member: tarfile.TarInfo) -> None:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as src:
            info = os.fstat(src.fileno())
            if not stat.S_ISREG(info.st_mode):  # swapped since it was listed
                return
            member.size = info.st_size
            self._count(info.st_size)
            self._tar.addfile(member, src)

    def finish(self) -> IO[bytes]:
        """The tar, at its start, after its member list was checked again."""
        self._tar.close()
        self._file.seek(0)
        with tarfile.open(fileobj=self._file, mode="r:") as check:
            for name in check.getnames():
                parts = name.split("/")
                if parts[0] not in self._filtered:
                    continue
                for i in range(2, len(parts) + 1):
                    pattern = self.names.match(parts[1:i])
                    if pattern:
                        raise SandboxError(
                            f"refused to send {name!r} to the container engine: it matches "
                            f"the blocked name {pattern!r}"
                        )
        self._file.seek(0)
        return self._file


@dataclass(slots=True)
class WriteBack:
    written: int = 0
    deleted: int = 0
    #: What the sandbox made that is not written: blocked names, devices and FIFOs.
    skipped: list[str] = field(default_factory=list)


class _Bounded:
    """Chunks into a spool file, refused past ``limit`` bytes."""

    @staticmethod
    def spool(chunks: Iterable[bytes], limit: int, what: str, limits: ArchiveLimits) -> IO[bytes]:
        out = tempfile.TemporaryFile(prefix="jarvis-back-")  # noqa: SIM115 (returned)
        total = 0
        try:
            for chunk in chunks:
                total += len(chunk)
                if total > limit:
                    raise limits.too_large(what)
                out.write(chunk)
            out.seek(0)
        except BaseException:
            out.close()
            raise
        return out


def _checked_members(
    tar: tarfile.TarFile, limits: ArchiveLimits, what: str
) -> tuple[list[tuple[str, tarfile.TarInfo]], list[str]]:
    """Every member, normalised, after checking all of them (nothing is returned from an
    archive that fails a check); and the special files', which are not."""
    found: list[tuple[str, tarfile.TarInfo]] = []
    links: set[str] = set()
    special: list[str] = []
    total = files = 0
    regular: dict[str, tarfile.TarInfo] = {}
    for member in tar:
        name = _normal(member.name)
        if name in ("", "."):
            continue
        parts = name.split("/")
        if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise SandboxError(f"refused the change to {what}: it names {member.name!r}")
        if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
            special.append(name)  # a device or a FIFO: never made on the host
            continue
        if any("/".join(parts[:i]) in links for i in range(1, len(parts))):
            raise SandboxError(f"refused the change to {what}: {member.name!r} is under a symlink")
        files += 1
        total += member.size if member.isreg() else 0
        if files > limits.max_files:
            raise limits.too_many(f"the change to {what}")
        if total > limits.max_bytes:
            raise limits.too_large(f"the change to {what}")
        if member.issym():
            links.add(name)
        if member.isreg():
            regular[name] = member
        if member.islnk():  # a hard link in the tree: a copy of its file here
            linked = regular.get(_normal(member.linkname))
            if linked is None:
                special.append(name)
                continue
            member = linked
        found.append((name, member))
    return found, special


def _normal(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.rstrip("/")


def _blocked(names: NameFilter, name: str) -> bool:
    parts = name.split("/")
    return any(names.match(parts[:i]) for i in range(1, len(parts) + 1))


def write_back(
    chunks: Iterable[bytes],
    root_fd: int,
    sent: set[str],
    limits: ArchiveLimits,
    names: NameFilter,
    what: str,
) -> WriteBack:
    """Apply the tar in ``chunks`` (a directory's tree, members relative to it) to the
    directory ``root_fd``; what was in ``sent`` and is gone is deleted."""
    report = WriteBack()
    limit = limits.max_bytes + _OVERHEAD * (limits.max_files + 2) + 10240
    with (
        _Bounded.spool(chunks, limit, f"the change to {what}", limits) as spool,
        tarfile.open(fileobj=spool, mode="r:") as tar,
    ):
        members, special = _checked_members(tar, limits, what)
        report.skipped = [n for n, _ in members if _blocked(names, n)] + special
        members = [(n, m) for n, m in members if not _blocked(names, n)]
        root = os.open(".", _DIR, dir_fd=root_fd)
        try:
            for name, member in members:
                _apply(tar, root, name, member, what)
                report.written += 1
            seen = {n for n, _ in members} | set(report.skipped)
            for gone in sorted(sent - seen, key=lambda p: -p.count("/")):
                if not _blocked(names, gone) and _delete(root, gone):
                    report.deleted += 1
        finally:
            os.close(root)
    return report


@contextlib.contextmanager
def _parent(root: int, name: str, what: str) -> Iterator[tuple[int, str]]:
    """The directory holding ``name`` (reached without following a link) and the last
    component."""
    *dirs, last = name.split("/")
    fd = os.dup(root)
    try:
        for part in dirs:
            try:
                child = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                raise SandboxError(
                    f"refused the change to {what}: {name!r} is not under a directory "
                    f"({exc.strerror})"
                ) from exc
            os.close(fd)
            fd = child
        yield fd, last
    finally:
        os.close(fd)


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _clear(dir_fd: int, name: str, info: os.stat_result | None, keep_dir: bool) -> None:
    if info is None or (keep_dir and stat.S_ISDIR(info.st_mode)):
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def _apply(tar: tarfile.TarFile, root: int, name: str, member: tarfile.TarInfo, what: str) -> None:
    mode = member.mode & 0o777
    with _parent(root, name, what) as (fd, last):
        info = _lstat(fd, last)
        if member.isdir():
            _clear(fd, last, info, keep_dir=True)
            if info is None or not stat.S_ISDIR(info.st_mode):
                os.mkdir(last, mode | 0o700, dir_fd=fd)
            return
        if member.issym():
            if (
                info is not None
                and stat.S_ISLNK(info.st_mode)
                and os.readlink(last, dir_fd=fd) == member.linkname
            ):
                return
            _clear(fd, last, info, keep_dir=False)
            os.symlink(member.linkname, last, dir_fd=fd)
            return
        if (
            info is not None
            and stat.S_ISREG(info.st_mode)
            and info.st_size == member.size
            and int(info.st_mtime) == int(member.mtime)
        ):
            return  # unchanged: keep the host's file (and its times) as it is
        if info is not None and not stat.S_ISREG(info.st_mode):
            _clear(fd, last, info, keep_dir=False)
        src = tar.extractfile(member)
        assert src is not None  # a regular member
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(last, flags, mode, dir_fd=fd)
        with os.fdopen(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            os.fchmod(dst.fileno(), mode)
            os.utime(dst.fileno(), (member.mtime, member.mtime))


def _delete(root: int, name: str) -> bool:
    try:
        with _parent(root, name, "") as (fd, last):
            info = _lstat(fd, last)
            if info is None:
                return False
            if stat.S_ISDIR(info.st_mode):
                try:
                    os.rmdir(last, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        return False  # holds what was not sent (a left-out file)
                    raise
            else:
                os.unlink(last, dir_fd=fd)
            return True
    except SandboxError:
        return False  # its directory is gone or replaced: nothing of ours to delete
