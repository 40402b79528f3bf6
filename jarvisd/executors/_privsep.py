"""Privilege separation inside a sandbox: the agent runner and the code it runs for the
model under two different users, so that code cannot reach the runner's frame pipe.

A container backend starts a program that asked for it (``ExecRequest.separate_code``)
as root inside the container, with every capability dropped but CAP_SETUID and
CAP_SETGID, no-new-privileges on, and ``JARVIS_PRIVSEP="UID:GID:CODE_UID"`` in its
environment. The program calls :func:`drop_privileges` first thing:

* it becomes UID:GID (real and effective), keeping root only as its *saved* uid: its
  capabilities are no longer effective, but it can still start a child as CODE_UID
  and signal that child (:func:`become`, :func:`kill_group_as`);
* it marks itself not dumpable (``PR_SET_DUMPABLE=0``): no process without
  CAP_SYS_PTRACE, of whatever uid, may open ``/proc/<pid>/fd`` or ptrace it;
* the container's init (``docker-init``, which holds the same stdin and stdout) stays
  root, out of reach of both.

Model-written code then runs as CODE_UID with the runner's group: it has no
capabilities (all its uids are non-root), cannot signal, trace or read the runner or
init, and cannot regain the saved root uid, which only the runner holds.

Standard library only: this runs inside the bare python3 sandbox image.
"""

from __future__ import annotations

import ctypes
import os
import signal
from dataclasses import dataclass

__all__ = ["ENV", "CodeUser", "PrivsepError", "become", "drop_privileges", "kill_group_as"]

ENV = "JARVIS_PRIVSEP"
_PR_SET_DUMPABLE = 4


class PrivsepError(RuntimeError):
    """The program cannot separate itself as asked: it must not run."""


@dataclass(frozen=True, slots=True)
class CodeUser:
    """The user model-written code runs as (the runner's group, another uid)."""

    uid: int
    gid: int


def set_dumpable(dumpable: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, int(dumpable), 0, 0, 0) != 0:
        raise PrivsepError(f"prctl(PR_SET_DUMPABLE) failed: {os.strerror(ctypes.get_errno())}")


def drop_privileges() -> CodeUser | None:
    """Separate as ``JARVIS_PRIVSEP`` says (when started as root), and become not
    dumpable in any case. Returns the user for code children, or None when this process
    was started unprivileged (bwrap, a host process): its children then share its uid."""
    spec = os.environ.pop(ENV, "")
    code: CodeUser | None = None
    if os.geteuid() == 0:
        try:
            uid, gid, code_uid = (int(part) for part in spec.split(":"))
        except ValueError:
            raise PrivsepError(
                f"started as root without a valid {ENV} (UID:GID:CODE_UID): refusing to run"
            ) from None
        if 0 in (uid, gid, code_uid) or uid == code_uid:
            raise PrivsepError(f"{ENV}={spec!r}: the two users must differ and not be root")
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        # Root stays only as the saved uid: effective capabilities are cleared now, the
        # permitted ones (SETUID, SETGID) kept for starting and stopping code children.
        os.setresuid(uid, uid, 0)
        code = CodeUser(code_uid, gid)
    # After the uid change (which resets it), and in every case.
    set_dumpable(False)
    return code


def become(user: CodeUser) -> None:
    """Turn this process (a fresh child of a separated runner) into ``user`` for good:
    every uid non-root, so every capability is gone. In a child only, before exec."""
    os.seteuid(0)  # the saved root uid: CAP_SETUID and CAP_SETGID are effective again
    os.setgroups([])
    os.setresgid(user.gid, user.gid, user.gid)
    os.setresuid(user.uid, user.uid, user.uid)


def kill_group_as(user: CodeUser, pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to process group ``pgid`` of ``user``: a runner of another uid may
    not signal it itself, so a forked child becomes ``user`` and does."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            become(user)
            os.killpg(pgid, sig)
        except OSError:
            code = 1
        os._exit(code)
    os.waitpid(pid, 0)
