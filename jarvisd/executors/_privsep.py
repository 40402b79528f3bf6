"""Privilege separation inside a sandbox: the agent runner and the code it runs for the
model under two different users, so that code cannot reach the runner's frame pipe,
and neither of them can become root again.

A container backend starts a program that asked for it (``ExecRequest.separate_code``)
as root inside the container, with every capability dropped but CAP_SETUID and
CAP_SETGID, no-new-privileges on, and ``JARVIS_PRIVSEP="UID:GID:CODE_UID"`` in its
environment. The program is started isolated (``python3 -I``: no working directory,
no ``PYTHON*`` variables and no user site on its import path, so nothing a sandboxed
user can write is ever imported) and calls :func:`._launcher.drop_privileges` first thing:

* it forks. The parent stays root as the **launcher** (``_launcher``): it has
  imported all it will ever need, runs no other code, and on the runner's request
  starts each code process as CODE_UID (dropping in the child, then checking that no
  id and no capability is left) and stops it, and stops every process of CODE_UID
  that outlives its session;
* the child, the **runner**, becomes UID:GID for good (real, effective *and saved*
  ids), checks that, and is not dumpable (``PR_SET_DUMPABLE=0``): no process without
  CAP_SYS_PTRACE may open ``/proc/<pid>/fd`` or ptrace it;
* the container's init (``docker-init``, which holds the same stdin and stdout) stays
  root, out of reach of both.

So model-written code runs as CODE_UID with the runner's group: it has no
capabilities, cannot signal, trace or read the runner, the launcher or init, and even
code that took the runner over would hold no saved root uid to regain.

Standard library only: this runs inside the bare python3 sandbox image.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

__all__ = [
    "ENV",
    "CodeUser",
    "PrivsepError",
    "drop_to",
    "parse_plan",
    "set_dumpable",
    "verify_dropped",
]

ENV = "JARVIS_PRIVSEP"
_PR_SET_DUMPABLE = 4
#: The capability sets of /proc/self/status that must be empty once dropped.
_HELD_CAPS = (b"CapPrm:", b"CapEff:", b"CapAmb:")


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


def parse_plan(spec: str) -> tuple[int, int, CodeUser]:
    """``UID:GID:CODE_UID`` -> (runner uid, gid, code user), or PrivsepError."""
    try:
        uid, gid, code_uid = (int(part) for part in spec.split(":"))
    except ValueError:
        raise PrivsepError(
            f"started as root without a valid {ENV} (UID:GID:CODE_UID): refusing to run"
        ) from None
    if 0 in (uid, gid, code_uid) or uid == code_uid:
        raise PrivsepError(f"{ENV}={spec!r}: the two users must differ and not be root")
    return uid, gid, CodeUser(code_uid, gid)


def drop_to(uid: int, gid: int) -> None:
    """Become ``uid``:``gid`` for good (real, effective and saved ids; no
    supplementary groups), then :func:`verify_dropped`."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    verify_dropped(uid, gid)


def verify_dropped(uid: int, gid: int) -> None:
    """PrivsepError unless every id is ``uid``/``gid`` and no capability is held:
    a drop that half worked must never go on to run anything."""
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise PrivsepError(
            f"ids after the drop are {os.getresuid()}/{os.getresgid()}, not {uid}/{gid}"
        )
    if os.getgroups() not in ([], [gid]):
        raise PrivsepError(f"supplementary groups survived the drop: {os.getgroups()}")
    # Bytes: decoding text could import a codec, and nothing is imported after a drop.
    with open("/proc/self/status", "rb") as status:
        for line in status:
            if line.startswith(_HELD_CAPS) and int(line.split()[1], 16) != 0:
                raise PrivsepError(f"a capability survived the drop: {line.strip()!r}")
