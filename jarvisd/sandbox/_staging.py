"""Root only: hand the container engine mount paths that nobody else can swap.

The engine resolves a bind mount's source path itself, in its own process, when the
container starts. A checked path whose directory was swapped for a symlink in between
would mount whatever the link points at. So, as root, each checked mount is opened
again without following symlinks (:func:`~jarvisd.sandbox._mounts.pin`: refused unless
it is still the very object that was checked), bind-mounted from that descriptor onto
a fresh directory that only root can reach, and the engine is given that directory.
Once the container has started it holds its own copy of the mount, and the staging
mounts are detached.

Only useful when the engine sees our mounts: it must run in our mount namespace
(:func:`can_stage`). Without staging (not root, another namespace) the identity check
inside the container (``_prelude``) still refuses a swapped mount.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import re
import socket
import stat
import struct
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from .._errors import MountRefused, SandboxError
from .._procs import pid_alive
from ._mounts import Mount, pin

__all__ = ["can_stage", "pid_alive", "staged", "sweep_stale_stages"]

log = logging.getLogger(__name__)

_MS_BIND = 0x1000
_MNT_DETACH = 2
_PREFIX = "jarvis-mnt-"
_STAGE_NAME = re.compile(rf"^{_PREFIX}(\d+)-")


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_void_p,
    ]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def _bind(fd: int, target: Path) -> None:
    # /proc/self/fd/N is a magic link: mount(2) binds the object the descriptor holds,
    # not whatever a path leads to now. Non-recursive, like the engine's binds.
    source = f"/proc/self/fd/{fd}".encode()
    if _libc().mount(source, os.fsencode(target), None, _MS_BIND, None) != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"cannot stage a mount at {target}: {os.strerror(err)}")


def _detach(target: Path) -> None:
    _libc().umount2(os.fsencode(target), _MNT_DETACH)


def can_stage(address: str) -> bool:
    """Whether mounts can be staged for the engine on the unix socket ``address``
    ("unix://PATH", or "" for the default socket): we are root, the engine runs in our
    mount namespace (asked of the kernel through the socket's peer credentials), so a
    mount we make is what it resolves, and the staging directory is root's alone."""
    if os.geteuid() != 0:
        return False
    path = (address or "unix:///var/run/docker.sock").removeprefix("unix://")
    if "://" in path:
        return False  # not a local engine
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(path)
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid = struct.unpack("3i", creds)[0]
        if pid <= 0 or os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"):
            return False
        _private_parent()
    except OSError:
        return False
    except SandboxError as exc:
        log.warning("mounts are not staged: %s", exc)
        return False
    return True


def _private_parent() -> Path:
    """The temporary directory, if no one but root can rename anything on the way to
    it (each component root-owned and not writable by others, or sticky like /tmp)."""
    parent = Path(tempfile.gettempdir()).resolve()
    for directory in (parent, *parent.parents):
        info = os.lstat(directory)
        sticky = bool(info.st_mode & stat.S_ISVTX)
        if info.st_uid != 0 or (info.st_mode & 0o022 and not sticky):
            raise SandboxError(
                f"cannot stage mounts under {parent}: {directory} is not root's alone "
                "(set TMPDIR to a directory only root can write)"
            )
    return parent


@contextlib.contextmanager
def staged(mounts: Sequence[Mount]) -> Iterator[list[str]]:
    """The engine-facing source path of each mount, valid until the block ends: a bind
    of exactly what was checked, under a fresh root-only directory. Raises MountRefused
    when a mount no longer is what was checked."""
    sweep_stale_stages()
    stage = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=_private_parent()))
    targets: list[Path] = []
    try:
        for i, mount in enumerate(mounts):
            fd = pin(mount)
            try:
                target = stage / str(i)
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    target.mkdir(0o700)
                else:
                    os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                targets.append(target)
                _bind(fd, target)
            finally:
                os.close(fd)
            info = os.lstat(target)
            if (info.st_dev, info.st_ino) != mount.identity:
                raise MountRefused(f"{mount.source}: the staged mount is not what was checked")
        yield [str(t) for t in targets]
    finally:
        _remove_stage(stage, targets)


def _remove_stage(stage: Path, targets: Sequence[Path]) -> None:
    for target in targets:
        _detach(target)
        with contextlib.suppress(OSError):
            target.rmdir() if target.is_dir() else target.unlink()
    with contextlib.suppress(OSError):
        stage.rmdir()


@functools.cache
def sweep_stale_stages() -> None:
    """Detach and remove staging directories left by jarvis processes that died
    between staging and starting a container (once per process)."""
    try:
        parent = _private_parent()
        names = os.listdir(parent)
    except (OSError, SandboxError):
        return
    for name in names:
        match = _STAGE_NAME.match(name)
        if match is None or pid_alive(int(match[1])):
            continue
        stage = parent / name
        with contextlib.suppress(OSError):
            info = os.lstat(stage)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == 0:
                log.info("removing the stale mount staging directory %s", stage)
                _remove_stage(stage, [stage / child for child in os.listdir(stage)])
