"""The host's side of the mounts a started agent's workspace arrives by (root only).

A slot's container binds, at each ``:rw`` root's path, an empty directory of the slot's
with ``rslave`` propagation; those directories lie under the pool's directory, made a
shared mount (:func:`share`: bound onto itself first, the host's ``/`` being private
here). A mount made under one of them later, on the host, propagates into the container
(``mount(2)`` of a pinned descriptor for the workspace; the new mount calls for a
read-only one, :func:`read_only_over`, since a mount propagates with the flags it has
when it is made and a read-only remount afterwards does not follow it).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import MountRefused, SandboxError

if TYPE_CHECKING:
    from ..sandbox._mounts import Mount

__all__ = [
    "bind",
    "check_own",
    "detach",
    "is_mount_point",
    "mounts_under",
    "new_mount_api",
    "read_only_over",
    "share",
    "unshare",
]

_MS_BIND = 0x1000
_MS_SHARED = 1 << 20
_MNT_DETACH = 2
# The new mount calls: one number on every architecture (open_tree and move_mount from
# Linux 5.2, mount_setattr from 5.12).
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442
_OPEN_TREE_CLONE, _AT_EMPTY_PATH = 1, 0x1000
_MOVE_MOUNT_F_EMPTY_PATH, _MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
_MOUNT_ATTR_RDONLY = 1


def _libc() -> ctypes.CDLL:
    from ..sandbox._staging import _libc as libc

    return libc()


def bind(source: str | None, target: Path, flags: int = _MS_BIND) -> None:
    """``mount(2)`` of ``source`` at ``target`` (a bind by default: ``/proc/self/fd/N``
    binds exactly the object the descriptor holds)."""
    src = None if source is None else source.encode()
    if _libc().mount(src, os.fsencode(target), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"cannot mount at {target}: {os.strerror(err)}")


def detach(target: Path) -> None:
    """``target``'s mount (and what is under it) detached; nothing when it is none."""
    _libc().umount2(os.fsencode(target), _MNT_DETACH)


def mounts_under(base: Path) -> list[Path]:
    """Mount points strictly under ``base``, deepest first."""
    found = []
    prefix = str(base) + "/"
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            point = line.split()[4].encode().decode("unicode_escape")
            if point.startswith(prefix):
                found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def share(base: Path) -> None:
    """``base`` as a shared mount (bound onto itself first), so that the ``rslave``
    binds of slots under it receive the workspace mounts made later."""
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(base, 0o711)
    if not is_mount_point(base):  # (a killed jarvisd's may still be there)
        bind(str(base), base, _MS_BIND)
    bind(None, base, _MS_SHARED)


def is_mount_point(path: Path) -> bool:
    # Not os.path.ismount: a directory bound onto itself has its parent's device.
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        return any(line.split()[4].encode().decode("unicode_escape") == str(path) for line in info)


def unshare(base: Path) -> None:
    """``base``'s own mount gone (what :func:`share` made), once nothing is under it."""
    while is_mount_point(base):
        if _libc().umount2(os.fsencode(base), _MNT_DETACH) != 0:
            break


def check_own(directory: Path) -> None:
    """``directory`` is a directory of jarvis's (root's), not a link, that no one else
    may write to."""
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise SandboxError(f"{directory} is not jarvis's private directory")


@functools.cache
def new_mount_api() -> bool:
    """Whether the kernel has ``mount_setattr`` (asked with no descriptor: EBADF)."""
    result = _libc().syscall(_SYS_MOUNT_SETATTR, -1, b"", 0, None, 0)
    return result == 0 or ctypes.get_errno() != errno.ENOSYS


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def read_only_over(checked: Mount, target: Path) -> None:
    """A read-only bind of exactly ``checked`` over ``target`` (the same object, seen
    through the workspace's mount in the slot). Made read-only before it is put
    there: a mount propagates into the container with the flags it has then."""
    from ..sandbox._mounts import pin

    def call(number: int, *args: Any) -> int:
        result = int(_libc().syscall(number, *args))
        if result < 0:
            err = ctypes.get_errno()
            raise SandboxError(f"cannot mount {checked.source} read-only: {os.strerror(err)}")
        return result

    source = pin(checked)
    tree = over = -1
    try:
        over = os.open(target, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        info = os.fstat(over)
        if (info.st_dev, info.st_ino) != checked.identity:
            raise MountRefused(f"{checked.source} changed while it was mounted")
        tree = call(_SYS_OPEN_TREE, source, b"", _OPEN_TREE_CLONE | os.O_CLOEXEC | _AT_EMPTY_PATH)
        attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
        call(_SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr))
        call(
            _SYS_MOVE_MOUNT,
            tree,
            b"",
            over,
            b"",
            _MOVE_MOUNT_F_EMPTY_PATH | _MOVE_MOUNT_T_EMPTY_PATH,
        )
    finally:
        for fd in (source, tree, over):
            if fd >= 0:
                os.close(fd)
