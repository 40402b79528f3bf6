"""The host-process backend of the code-executor seam.

NOT A SECURITY BOUNDARY. The program runs as the same user, on the same filesystem and
network as jarvis. What it does give: a fresh working directory, a minimal environment
(no inherited secrets), rlimits on CPU time, address space, processes and file size, a
new session, and a timeout after which the whole process group is killed (also on
cancellation). Each program runs under a subreaper (``_reaper``): whatever it starts,
detached or not, is killed when it ends or is stopped, so nothing outlives the run and
no grandchild holding its stdout keeps the run waiting. Use a sandbox backend (docker,
podman, bwrap) for untrusted code; config ``sandbox.backend = "none"`` selects this one
and logs a warning on every run.

Inside a separated sandbox runner (``_privsep``) programs are started by the runner's
root launcher as the code user instead (``launcher=``; ``_launched``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .._errors import SandboxError
from ..protocol import MAX_FRAME_BYTES
from ._base import Channel, Clock, CodeExecutor, ExecRequest, ExecResult
from ._launched import LaunchedProcess
from ._launcher import Launcher
from ._privsep import PrivsepError
from ._reaper import REAPER

__all__ = ["Limits", "SubprocessChannel", "SubprocessExecutor", "spawn_reaped"]

log = logging.getLogger(__name__)

_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
_STDERR_TAIL = 64 * 1024
#: Unread stdout kept when the program ends (the rest is read and dropped).
_REST_LIMIT = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    cpu_seconds: int | None = None  # None: the request's timeout, rounded up, plus one
    memory_bytes: int = 1024 * 1024 * 1024
    processes: int = 64  # RLIMIT_NPROC counts the user's processes; root is exempt
    file_bytes: int = 64 * 1024 * 1024


def _rlimits(limits: Limits, timeout: float) -> list[tuple[int, int]]:
    cpu = limits.cpu_seconds or int(timeout) + 1
    return [
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_AS, limits.memory_bytes),
        (resource.RLIMIT_NPROC, limits.processes),
        (resource.RLIMIT_FSIZE, limits.file_bytes),
        (resource.RLIMIT_CORE, 0),
    ]


def _preexec(rlimits: list[tuple[int, int]]) -> None:
    # Runs in the forked child: everything it uses was imported before the fork.
    for kind, value in rlimits:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(kind, (value, value))


async def _exited(process: asyncio.subprocess.Process | LaunchedProcess) -> int:
    """The program's exit status, as soon as it has exited. Not ``Process.wait()``:
    on Python 3.11 that also waits until its pipes close, which a grandchild holding
    stdout can put off for ever."""
    if isinstance(process, LaunchedProcess):
        return await process.wait()
    delay = 0.01
    while process.returncode is None:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.2)
    return process.returncode


async def spawn_reaped(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    limit: int,
    preexec_fn: Callable[[], None] | None = None,
) -> asyncio.subprocess.Process:
    """Start ``argv`` under the reaper (``_reaper``), in a new session, with pipes for
    its stdin, stdout and stderr. OSError, as exec would give it, when it cannot start.
    Hand the process to a :class:`SubprocessChannel` with ``reaper=True``."""
    _check_runnable(argv[0], env.get("PATH", os.defpath), cwd)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-S",
        "-c",
        REAPER,
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(cwd),
        env=dict(env),
        start_new_session=True,
        preexec_fn=preexec_fn,
        limit=limit,
    )


def _check_runnable(program: str, path: str, cwd: Path) -> None:
    """OSError as exec would give it: under the reaper a program that cannot start
    would only exit 127, and callers are told at once instead."""
    if os.sep in program:
        program = str(cwd / program)
    found = shutil.which(program, mode=os.F_OK, path=path)
    if found is None:
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    if os.path.isdir(found) or not os.access(found, os.X_OK):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), program)


def _close_pipes(process: asyncio.subprocess.Process | LaunchedProcess) -> None:
    if isinstance(process, LaunchedProcess):
        process.close()
        return
    transport = getattr(process, "_transport", None)
    if transport is not None:
        with contextlib.suppress(Exception):
            transport.close()


class SubprocessChannel(Channel):
    def __init__(
        self,
        process: asyncio.subprocess.Process | LaunchedProcess,
        workdir: Path,
        timeout: float,
        launcher: Launcher | None = None,
        *,
        reaper: bool = False,
    ) -> None:
        self.process = process
        self.launcher = launcher
        #: The process is ``_reaper``, which stops what is below it on SIGTERM.
        self.reaper = reaper
        self.workdir = workdir
        self.reason = ""
        self.start = time.monotonic()
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        self.clock = Clock(timeout)
        self._watchdog = asyncio.get_running_loop().call_later(timeout, self._expire)

    async def _drain_stderr(self) -> None:
        stream = self.process.stderr
        if stream is None:
            return
        while chunk := await stream.read(65536):
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size > _STDERR_TAIL and len(self._stderr) > 1:
                self._stderr_size -= len(self._stderr.popleft())

    def _expire(self) -> None:
        delay = self.clock.due_in()
        if delay > 0:  # time left, or held while the host answers: look again later
            self._watchdog = asyncio.get_running_loop().call_later(delay, self._expire)
            return
        self._kill_group("timeout")

    def _kill_group(self, reason: str) -> None:
        if self.process.returncode is not None:
            return
        if not self.reason:
            self.reason = reason
        self._signal_group()

    def _signal_group(self) -> None:
        if self.launcher is not None:  # the code user's group: the launcher stops it
            with contextlib.suppress(PrivsepError, OSError):
                self.launcher.kill(self.process.pid)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.reaper and self.process.returncode is None:
                # The reaper first, alone: it kills everything below it, detached or
                # not, then exits (the group's SIGKILL would kill it too soon).
                os.kill(self.process.pid, signal.SIGTERM)
            else:
                os.killpg(self.process.pid, signal.SIGKILL)

    async def write(self, data: bytes) -> None:
        stdin = self.process.stdin
        if stdin is None or stdin.is_closing():
            raise SandboxError("the program's stdin is closed")
        try:
            stdin.write(data)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise SandboxError(
                f"the program stopped reading its input ({self.reason or 'exited'})"
            ) from exc

    async def close_stdin(self) -> None:
        stdin = self.process.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                await stdin.wait_closed()

    async def readline(self, limit: int = MAX_FRAME_BYTES + 1) -> bytes:
        stdout = self.process.stdout
        if stdout is None:
            return b""
        try:
            return await stdout.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial
        except asyncio.LimitOverrunError:
            # Longer than the stream's buffer: hand back an oversized piece so the
            # caller's size check refuses it.
            return await stdout.read(limit)

    async def _reap(self) -> ExecResult:
        code = await _exited(self.process)
        self._watchdog.cancel()
        rest = b""
        if self.process.stdout is not None:
            with contextlib.suppress(Exception):
                rest = await asyncio.wait_for(_read_bounded(self.process.stdout), 1.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._stderr_task, 1.0)
        # Children left in the group (daemonised helpers) go with it; whatever still
        # holds a pipe no longer keeps anything here waiting.
        self._signal_group()
        _close_pipes(self.process)
        self._stderr_task.cancel()
        shutil.rmtree(self.workdir, ignore_errors=True)
        reason = self.reason
        if not reason and code == -signal.SIGKILL:
            reason = "killed"
        if not reason and code == -signal.SIGXCPU:
            reason = "timeout"
        return ExecResult(
            exit_code=code,
            stdout=rest.decode("utf-8", "replace"),
            stderr=b"".join(self._stderr).decode("utf-8", "replace"),
            timed_out=reason == "timeout",
            reason=reason,
            duration_s=time.monotonic() - self.start,
        )

    async def kill(self, reason: str = "killed") -> None:
        self._kill_group(reason)


async def _read_bounded(stream: asyncio.StreamReader) -> bytes:
    """The stream to its end, keeping at most _REST_LIMIT bytes."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < _REST_LIMIT:
            kept += chunk[: _REST_LIMIT - len(kept)]
    return bytes(kept)


class SubprocessExecutor(CodeExecutor):
    name: ClassVar[str] = "subprocess"
    isolated: ClassVar[bool] = False

    def __init__(
        self, limits: Limits | None = None, *, warn: bool = False, launcher: Launcher | None = None
    ) -> None:
        self.limits = limits or Limits()
        self.warn = warn
        #: Programs are started by this launcher as the code user (a separated
        #: runner's; see _privsep), not as children of this process.
        self.launcher = launcher

    async def open(self, request: ExecRequest) -> Channel:
        if self.warn:
            log.warning(
                "sandbox.backend is 'none': running %s as a host process (NOT isolated)",
                request.argv[0] if request.argv else "?",
            )
        if not request.argv:
            raise SandboxError("nothing to run: empty argv")
        workdir = Path(tempfile.mkdtemp(prefix="jarvis-exec-"))
        for name, text in request.files.items():
            target = (workdir / name).resolve()
            if not target.is_relative_to(workdir.resolve()):  # noqa: ASYNC240 - fresh temp dir
                shutil.rmtree(workdir, ignore_errors=True)
                raise SandboxError(f"refused to write {name!r} outside the working directory")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        if self.launcher is not None:  # the code user shares our group, and works in here
            os.chmod(workdir, 0o770)
        env = {k: os.environ[k] for k in _ENV_KEEP if k in os.environ}
        env.setdefault("PATH", os.defpath)
        env.update(HOME=str(workdir), TMPDIR=str(workdir), PYTHONDONTWRITEBYTECODE="1")
        env.update(request.env)
        rlimits = _rlimits(self.limits, request.timeout)
        process: asyncio.subprocess.Process | LaunchedProcess
        try:
            if self.launcher is not None:
                process = await LaunchedProcess.start(
                    self.launcher, request.argv, env, str(workdir), rlimits, MAX_FRAME_BYTES + 2
                )
            else:
                process = await spawn_reaped(
                    request.argv,
                    cwd=workdir,
                    env=env,
                    limit=MAX_FRAME_BYTES + 2,
                    preexec_fn=lambda: _preexec(rlimits),
                )
        except (OSError, PrivsepError) as exc:
            shutil.rmtree(workdir, ignore_errors=True)
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise SandboxError(f"cannot start {request.argv[0]}: {why}") from exc
        return SubprocessChannel(
            process, workdir, request.timeout, self.launcher, reaper=self.launcher is None
        )


def python_executable() -> str:
    return sys.executable
