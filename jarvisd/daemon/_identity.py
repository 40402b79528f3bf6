"""Who is on the other end: the runtime directory, the daemon's socket and its pid.

A runtime path another user can create (a shared ``/tmp``, a mistyped
``JARVIS_RUNTIME_DIR``) must not let that user stand in for jarvisd: a client would
send them its prompts and mounts, and ``jarvis daemon stop`` would signal a process of
their choosing. So every side checks, at the moment of use:

* the runtime directory is a real directory (``lstat``: a symlink is refused, never
  followed), owned by the effective uid, mode 0700 -- :func:`check_private_dir`;
* the process serving the socket runs as the effective uid (``SO_PEERCRED``) --
  :func:`check_peer`. A root client talks only to root's daemon: root reaching another
  user's daemon would run that user's code on root's behalf;
* a pid read from the pid file belongs to a jarvisd of this uid before it is signalled,
  and the signal goes through a pidfd where there is one, so a recycled pid cannot be
  hit between the check and the kill -- :func:`signal_daemon`.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from collections.abc import Sequence
from pathlib import Path

from jarvisd._errors import DaemonError, DaemonUnavailable

__all__ = [
    "check_peer",
    "check_private_dir",
    "is_jarvisd_command",
    "peer_uid",
    "read_pid_file",
    "signal_daemon",
    "write_pid_file",
]

_PID_FILE_MAX_BYTES = 32
_MODULES = ("jarvisd.daemon", "jarvisd.daemon.__main__")


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process on the other end of a Unix socket (None: unknown here)."""
    if hasattr(socket, "SO_PEERCRED"):
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        return int(uid)
    return None  # elsewhere the 0700 directory and 0600 socket are the guard


def check_private_dir(path: Path, *, create: bool = False) -> None:
    """Refuse ``path`` unless it is a directory (not a symlink to one) owned by the
    effective uid with mode 0700. ``create``: make it (0700) when it is missing; an
    existing one is never chmod-ed, since that would follow a symlink planted there.
    Raises :class:`DaemonUnavailable` when it is missing (and not created), else
    :class:`DaemonError` with one line saying what is wrong."""
    if create:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
    try:
        st = os.lstat(path)
    except FileNotFoundError as exc:
        raise DaemonUnavailable(f"no jarvisd runtime directory {path}") from exc
    except OSError as exc:
        raise DaemonError(f"cannot inspect the jarvisd runtime directory {path}: {exc}") from exc
    euid = os.geteuid()
    fix = "remove it, or point JARVIS_RUNTIME_DIR at a private directory"
    if stat.S_ISLNK(st.st_mode):
        problem = "is a symlink"
    elif not stat.S_ISDIR(st.st_mode):
        problem = "is not a directory"
    elif st.st_uid != euid:
        problem = f"is owned by uid {st.st_uid}, not by this user (uid {euid})"
    elif stat.S_IMODE(st.st_mode) != 0o700:
        problem = f"has mode {stat.S_IMODE(st.st_mode):04o}, not 0700"
        fix = f"chmod 700 {path} if only you ever used it"
    else:
        return
    raise DaemonError(
        f"refusing the jarvisd runtime directory {path}: it {problem}, so another user "
        f"could stand in for jarvisd there ({fix})"
    )


def check_peer(sock: socket.socket, where: Path) -> None:
    """Refuse a socket served by another uid than ours."""
    uid = peer_uid(sock)
    if uid is not None and uid != os.geteuid():
        raise DaemonError(
            f"refusing {where}: it is served by uid {uid}, not by this user "
            f"(uid {os.geteuid()}), so it is not our jarvisd"
        )


def write_pid_file(path: Path) -> None:
    """Write our pid, 0600, never through a symlink left in the directory."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")


def read_pid_file(path: Path) -> int | None:
    """The pid in ``path`` (None: no file, a symlink, or no number in it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.read(fd, _PID_FILE_MAX_BYTES).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    return int(text) if text.isascii() and text.isdigit() and int(text) > 0 else None


def is_jarvisd_command(argv: Sequence[str]) -> bool:
    """Is this command line a jarvisd: the ``jarvisd`` script (run directly or by an
    interpreter) or ``python -m jarvisd.daemon``?"""
    if not argv:
        return False
    if Path(argv[0]).name == "jarvisd":
        return True
    rest = iter(argv[1:])
    for arg in rest:  # the interpreter's options, up to the script or -m module
        if arg == "-m":
            return next(rest, "") in _MODULES
        if arg.startswith("-m"):
            return arg[2:] in _MODULES
        if not arg.startswith("-"):
            return Path(arg).name == "jarvisd"
    return False


def _describe(pid: int) -> tuple[int | None, list[str]]:
    """(uid, command line) of ``pid``, the uid None unless its real and effective uids
    agree; raises ProcessLookupError when it is gone."""
    import psutil

    try:
        proc = psutil.Process(pid)
        uids = proc.uids()
        return (uids.real if uids.real == uids.effective else None), list(proc.cmdline())
    except psutil.NoSuchProcess as exc:
        raise ProcessLookupError(pid) from exc
    except psutil.Error:
        return None, []


def signal_daemon(pid: int, sig: int, pid_file: Path) -> bool:
    """Send ``sig`` to ``pid`` if it is a jarvisd of this uid; False when it is gone.
    Raises :class:`DaemonError` (and signals nothing) when it is someone else."""
    pidfd: int | None = None
    if hasattr(os, "pidfd_open"):
        try:  # held from before the check: the kill below reaches this process or none
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError:
            pidfd = None  # an old kernel: fall back to kill(2)
    try:
        try:
            uid, argv = _describe(pid)
        except ProcessLookupError:
            return False
        if uid != os.geteuid() or not is_jarvisd_command(argv):
            owner = "unknown" if uid is None else str(uid)
            command = " ".join(argv)[:80] or "?"
            raise DaemonError(
                f"not signalling pid {pid} from {pid_file}: it is not a jarvisd of this user "
                f"(uid {owner}, command {command!r}); remove the stale pid file"
            )
        try:
            if pidfd is not None:
                import signal

                signal.pidfd_send_signal(pidfd, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return False
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)
