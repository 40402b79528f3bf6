"""The launcher: the one root process of a separated runner (see ``_privsep``).

:func:`split` forks a runner started as root. The parent keeps root (with only
CAP_SETUID and CAP_SETGID, which the container grants) and serves the runner over a
socket pair, and nothing else; the child drops to the runner's user for good and
returns a :class:`Launcher`, the runner's handle.

What the launcher does, asked by the runner (one JSON request per datagram, file
descriptors passed with it):

* ``spawn``: fork a code process in a new session, with the stdin, stdout and stderr
  it was handed; in the child, drop to the code user (every id, no capability left,
  checked), set the rlimits, and only then enter the working directory and exec, with
  every other descriptor closed. Nothing is imported there: the launcher imported all
  it needs before the runner ran anything. Its exit status goes down the status pipe
  it was handed, then that pipe is closed.
* ``kill``: SIGKILL a code process's group (as the code user: a root process without
  CAP_KILL may not signal another uid).

Before every start and after every exit the launcher kills each process of the code
user that is in no live session: a process that model code left behind (detached,
in a session of its own) must not live on to plant files for the next session. When
the runner ends, every process of the code user goes, and the launcher exits with the
runner's status.

Standard library only, imported before the fork.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import selectors
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from ._privsep import ENV, CodeUser, PrivsepError, drop_to, parse_plan, set_dumpable

__all__ = ["Launcher", "drop_privileges", "split"]

#: A request or reply datagram: argv and environment of one program.
_MAX_MESSAGE = 1 << 20
#: The descriptors a spawn passes: stdin, stdout, stderr, status.
_SPAWN_FDS = 4
#: Rounds of killing leftovers (a leftover may fork while it is being killed).
_SWEEP_ROUNDS = 20


class Launcher:
    """The runner's handle on its launcher (thread-safe: one request at a time)."""

    def __init__(self, sock: socket.socket, user: CodeUser) -> None:
        self.sock = sock
        self.user = user
        self._lock = threading.Lock()

    def _call(self, request: dict[str, Any], fds: Sequence[int] = ()) -> dict[str, Any]:
        with self._lock:
            socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
            data = self.sock.recv(_MAX_MESSAGE)
        if not data:
            raise PrivsepError("the launcher is gone")
        reply: dict[str, Any] = json.loads(data)
        if "error" in reply:
            raise PrivsepError(str(reply["error"]))
        return reply

    def spawn(
        self,
        argv: Sequence[str],
        env: dict[str, str],
        cwd: str,
        limits: Sequence[tuple[int, int]],
        fds: Sequence[int],
    ) -> int:
        """Start ``argv`` as the code user; ``fds`` are its stdin, stdout, stderr and
        the write end of its status pipe. Returns its pid (also its group's)."""
        request = {
            "op": "spawn",
            "argv": list(argv),
            "env": env,
            "cwd": cwd,
            "limits": [list(limit) for limit in limits],
        }
        return int(self._call(request, fds)["pid"])

    def kill(self, pid: int) -> None:
        """SIGKILL the process group of code process ``pid``."""
        self._call({"op": "kill", "pid": pid})


def split(uid: int, gid: int, code: CodeUser) -> Launcher:
    """Fork: the parent serves as the launcher (it never returns); the child becomes
    ``uid``:``gid`` for good and gets the handle."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        ours.close()
        drop_to(uid, gid)
        return Launcher(theirs, code)
    theirs.close()
    try:
        _serve(ours, pid, code)
    except BaseException as exc:  # pragma: no cover - the launcher's own fault
        with contextlib.suppress(Exception):
            print(f"sandbox launcher: {exc!r}", file=sys.stderr)
    finally:
        _kill_all(code)
    os._exit(70)


# -- the launcher (root) ----------------------------------------------------------------


def _serve(sock: socket.socket, runner: int, code: CodeUser) -> NoReturn:
    set_dumpable(False)
    # The frame pipe is the runner's: this process holds none of it.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, None)
    selector.register(os.pidfd_open(runner), selectors.EVENT_READ, runner)
    status_pipes: dict[int, int] = {}  # live code process -> its status pipe
    while True:
        for key, _ in selector.select():
            pid = key.data
            if pid is None:
                if not _answer(sock, code, status_pipes, selector):
                    selector.unregister(sock)  # the runner is ending: wait for it
            elif pid == runner:
                _, status = os.waitpid(runner, 0)
                _kill_all(code)
                sys.stderr.flush()
                os._exit(_exit_code(status))
            else:
                _reap(pid, key.fd, status_pipes, selector)
                _sweep(code, set(status_pipes))


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def _reap(
    pid: int, pidfd: int, status_pipes: dict[int, int], selector: selectors.BaseSelector
) -> None:
    selector.unregister(pidfd)
    os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    pipe = status_pipes.pop(pid)
    with contextlib.suppress(OSError):
        os.write(pipe, str(os.waitstatus_to_exitcode(status)).encode())
    os.close(pipe)


def _answer(
    sock: socket.socket,
    code: CodeUser,
    status_pipes: dict[int, int],
    selector: selectors.BaseSelector,
) -> bool:
    """Serve one request; False when the runner has closed its end."""
    data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, _SPAWN_FDS)
    if not data:
        for fd in fds:
            os.close(fd)
        return False
    reply: dict[str, Any]
    try:
        request = json.loads(data)
        if request.get("op") == "spawn" and len(fds) == _SPAWN_FDS:
            _sweep(code, set(status_pipes))
            pid = _spawn(request, fds, code)
            status_pipes[pid] = os.dup(fds[3])
            selector.register(os.pidfd_open(pid), selectors.EVENT_READ, pid)
            reply = {"pid": pid}
        elif request.get("op") == "kill" and int(request["pid"]) in status_pipes:
            _kill_as(code, [-int(request["pid"])])
            reply = {"ok": True}
        elif request.get("op") == "kill":
            reply = {"ok": True}  # already reaped: nothing of it to kill
        else:
            reply = {"error": f"bad launcher request {request.get('op')!r}"}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reply = {"error": f"launcher: {exc}"}
    finally:
        for fd in fds:
            os.close(fd)
    sock.send(json.dumps(reply).encode())
    return True


def _spawn(request: dict[str, Any], fds: Sequence[int], code: CodeUser) -> int:
    argv = [str(a) for a in request["argv"]]
    env = {str(k): str(v) for k, v in dict(request["env"]).items()}
    cwd = str(request["cwd"])
    limits = [(int(kind), int(value)) for kind, value in request["limits"]]
    if not argv:
        raise ValueError("empty argv")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setsid()
            for target, fd in enumerate(fds[:3]):
                os.dup2(fd, target)
            drop_to(code.uid, code.gid)
            for kind, value in limits:
                with contextlib.suppress(ValueError, OSError):
                    resource.setrlimit(kind, (value, value))
            os.chdir(cwd)  # only as the code user: a directory it may enter
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            os.execvpe(argv[0], argv, env)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                os.write(2, f"cannot start {argv[0]}: {exc}\n".encode())
        os._exit(127)
    return pid


def _code_processes(code: CodeUser) -> dict[int, int]:
    """Every process with an id of the code user, and its session."""
    found: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                uids = next(line for line in f if line.startswith(b"Uid:")).split()[1:]
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except (OSError, StopIteration):
            continue
        if str(code.uid).encode() in uids:
            # The command name may hold spaces and parentheses: fields follow the last ")".
            fields = stat[stat.rfind(b")") + 2 :].split()
            found[int(name)] = int(fields[3])
    return found


def _sweep(code: CodeUser, live: set[int]) -> None:
    """Kill every process of the code user outside the sessions in ``live``."""
    for _ in range(_SWEEP_ROUNDS):
        strays = [pid for pid, sid in _code_processes(code).items() if sid not in live]
        if not strays:
            return
        _kill_as(code, strays)


def _kill_all(code: CodeUser) -> None:
    _kill_as(code, [-1])


def _kill_as(code: CodeUser, targets: Sequence[int]) -> None:
    """SIGKILL ``targets`` (pids; -PGID for a group, -1 for all the code user may
    signal: all its processes) from a child that becomes the code user."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setresgid(code.gid, code.gid, code.gid)
            os.setresuid(code.uid, code.uid, code.uid)
            for target in targets:
                with contextlib.suppress(OSError):
                    os.kill(target, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def drop_privileges() -> Launcher | None:
    """Separate as ``JARVIS_PRIVSEP`` says (when started as root; the launcher parent
    never returns from here), and become not dumpable in any case. Returns the
    launcher's handle for code processes, or None when this process was started
    unprivileged (bwrap, a host process): its children then share its uid."""
    spec = os.environ.pop(ENV, "")
    launcher: Launcher | None = None
    if os.geteuid() == 0:
        uid, gid, code = parse_plan(spec)
        launcher = split(uid, gid, code)
    # After the uid change (which resets it), and in every case.
    set_dumpable(False)
    return launcher
