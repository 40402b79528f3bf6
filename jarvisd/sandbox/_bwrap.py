"""The lighter backend for machines without a container engine: bubblewrap.

What it gives: new user, pid, network (loopback only; a run that allows hosts gets its
egress proxy's socket and a forwarder to it, ``_egress``), IPC, UTS and cgroup namespaces;
no further user namespaces inside (``--disable-userns``, where this bwrap has it); a
seccomp filter (``_seccomp``: mounts, namespaces, ptrace, keyrings, bpf,
perf_event_open, io_uring, modules... refused); an empty read-only tmpfs root with the
host's /usr (and python3) read-only, a fresh /proc and /dev, a private tmpfs /tmp;
checked mounts (``--ro-bind`` is recursive, so mounts nested under an allowed directory
are read-only too), each verified inside before the program starts (the prelude: bwrap
resolves the path itself, so a path swapped after the check is refused); all
capabilities dropped; a new session (no terminal injection); jarvis's packages
read-only at /opt/jarvis; a clean environment. It starts in tens of milliseconds and
needs no image.

What it does NOT give (be honest about it): no cgroup limits. Memory, processes, CPU
time and file size are rlimits (RLIMIT_AS, RLIMIT_NPROC, RLIMIT_CPU, RLIMIT_FSIZE) on
the sandbox's processes: RLIMIT_NPROC counts every process of the uid it runs as (as
root, jarvis runs it as uid 10001 so the limit binds; root itself would be exempt), a
memory hog gets MemoryError rather than an OOM kill, and the /tmp tmpfs is bounded by
its size only. The seccomp filter is a deny list (Docker's default profile is an allow
list). The host kernel's /usr is visible read-only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import resource  # noqa: F401 - loaded before fork: the sandbox uid may not read our stdlib
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from .._config import Config
from .._errors import SandboxError, SandboxUnavailable
from ..executors import Channel, CodeExecutor, ExecRequest
from ..executors._subprocess import Limits, SubprocessChannel, _preexec, _rlimits
from ..protocol import MAX_FRAME_BYTES
from ._docker import _write_inputs
from ._egress import egress_bind, forward_args, proxy_env
from ._mounts import Mount, MountPolicy
from ._policy import CODE_ROOT, INPUT_DIR, SandboxPolicy, code_dirs, confirm_mounts, prelude_argv
from ._seccomp import seccomp_program

__all__ = ["BwrapExecutor", "bwrap_path"]


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _bwrap_or_raise() -> str:
    bwrap = bwrap_path()
    if bwrap is None:
        raise SandboxUnavailable(
            "bubblewrap is not installed: apt-get install -y bubblewrap "
            '(or set sandbox.backend = "docker")'
        )
    return bwrap


@functools.cache
def _supports(bwrap: str, option: str) -> bool:
    """Whether this bubblewrap knows ``option`` (``--disable-userns`` came in 0.8)."""
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return option in done.stdout + done.stderr


def _root_argv(bwrap: str, tmp_bytes: int) -> list[str]:
    """bwrap and the sandbox's root: namespaces, the host's /usr read-only, /proc, /dev,
    a bounded /tmp, and the directory jarvis's code is bound under (one option a line)."""
    return [
        bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
        "--cap-drop", "ALL", "--hostname", "sandbox", "--tmpfs", "/",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
        "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
        "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
        "--ro-bind-try", "/etc/localtime", "/etc/localtime",
        "--proc", "/proc", "--dev", "/dev",
        "--size", str(tmp_bytes), "--perms", "1777", "--tmpfs", "/tmp",
        "--dir", CODE_ROOT,
    ]  # fmt: skip


class BwrapExecutor(CodeExecutor):
    name: ClassVar[str] = "bwrap"
    isolated: ClassVar[bool] = True

    def __init__(self, config: Config, *, policy: SandboxPolicy | None = None) -> None:
        self.config = config
        self.policy = policy or SandboxPolicy.from_config(config)
        self.mounts = MountPolicy(
            config.sandbox.allowed_roots, max_scan_entries=config.sandbox.max_mount_entries
        )

    async def check(self) -> None:
        _bwrap_or_raise()

    def _argv(
        self, request: ExecRequest, mounts: Sequence[Mount], inputs: str | None, seccomp: int
    ) -> list[str]:
        bwrap = _bwrap_or_raise()
        policy = self.policy
        argv = _root_argv(bwrap, policy.tmp_bytes)
        if _supports(bwrap, "--disable-userns"):
            argv.append("--disable-userns")
        for name, path in sorted(code_dirs().items()):
            argv += ["--ro-bind", str(path), f"{CODE_ROOT}/{name}"]
        if inputs is not None:
            argv += ["--ro-bind", inputs, INPUT_DIR]
        for mount in mounts:
            argv += ["--ro-bind" if mount.read_only else "--bind", str(mount.source), mount.target]
        for source, target, read_only in request.system_binds:
            # jarvis's own (never from the edge): a jarvis code run's environment and
            # pip's local sources; bwrap makes the mount point in the tmpfs root.
            argv += ["--ro-bind" if read_only else "--bind", source, target]
        forward: Sequence[str] = ()
        if request.proxy_socket:
            # Still no network (--unshare-all): the proxy's socket and a forwarder to it.
            source, target, _ = egress_bind(request.proxy_socket)
            argv += ["--ro-bind", source, target]
            forward = forward_args(policy.uid, policy.gid)
        argv += ["--remount-ro", "/"]  # the tmpfs root too: only /tmp and :rw mounts write
        argv += ["--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin"]
        env = {
            "PYTHONPATH": CODE_ROOT,
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOME": "/tmp",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            **request.env,
            **(proxy_env() if request.proxy_socket else {}),
        }
        for key, value in env.items():
            argv += ["--setenv", key, value]
        if os.getuid() == 0:
            argv += ["--uid", str(policy.uid), "--gid", str(policy.gid)]
        argv += ["--seccomp", str(seccomp)]
        program = list(request.argv)
        if program and os.path.basename(program[0]).startswith("python"):
            program[0] = "/usr/bin/python3"
        program = prelude_argv(program, verify=mounts, inputs=inputs is not None, forward=forward)
        return [*argv, "--chdir", "/tmp", "--", *program]

    async def open(self, request: ExecRequest) -> Channel:
        if not request.argv:
            raise SandboxError("nothing to run: empty argv")
        mounts = self.mounts.check_all(request.mounts)
        program = seccomp_program()  # before anything is written: it may refuse this machine
        # The files' directory doubles as the channel's work directory (removed at the end).
        written = _write_inputs(request.files, self.policy) if request.files else None
        workdir = written or Path(tempfile.mkdtemp(prefix="jarvis-bwrap-"))
        inputs = str(written) if written is not None else None
        # bwrap reads the filter from a pipe, whole, before it starts the program.
        seccomp, feed = os.pipe()
        try:
            os.write(feed, program)
        finally:
            os.close(feed)
        try:
            argv = self._argv(request, mounts, inputs, seccomp)
            limits = Limits(
                memory_bytes=self.policy.memory_bytes,
                processes=self.policy.pids,
                file_bytes=self.policy.tmp_bytes,
            )
            timeout = request.timeout
            rlimits = _rlimits(limits, timeout)
            # As root, run bubblewrap as the sandbox uid: RLIMIT_NPROC does not bind root,
            # and an unprivileged user namespace is all bwrap needs.
            user = self.policy.uid if os.getuid() == 0 else None
            group = self.policy.gid if os.getuid() == 0 else None
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd="/",
                env={"PATH": os.environ.get("PATH", os.defpath)},
                start_new_session=True,
                preexec_fn=lambda: _preexec(rlimits),
                user=user,
                group=group,
                extra_groups=[] if user is not None else None,
                pass_fds=(seccomp,),
                limit=MAX_FRAME_BYTES + 2,
            )
        except OSError as exc:
            shutil.rmtree(workdir, ignore_errors=True)
            raise SandboxUnavailable(f"cannot start bubblewrap: {exc.strerror or exc}") from exc
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        finally:
            os.close(seccomp)
        with contextlib.suppress(OSError):
            os.chmod(workdir, 0o755)
        channel = SubprocessChannel(process, workdir, timeout)
        if mounts:
            await confirm_mounts(channel)
        return channel
