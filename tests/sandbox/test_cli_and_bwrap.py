"""`jarvis sandbox run/doctor/gc` on the real engine, and the bubblewrap backend."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from jarvisd._errors import MountRefused
from jarvisd.executors import ExecRequest, ExecResult, executor_for, run_to_completion
from jarvisd.sandbox import BwrapExecutor, DockerExecutor
from jarvisd.sandbox._bwrap import bwrap_path
from tests.conftest import require

from .conftest import sandbox_config


def jarvis(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jarvisd", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )  # fmt: skip


def write_config(tmp_path: Path, roots: tuple[Path, Path]) -> dict[str, str]:
    ro, rw = roots
    config = tmp_path / "config.toml"
    config.write_text(f'[sandbox]\nallowed_roots = ["{ro}", "{rw}:rw"]\nmemory = "128m"\n')
    return {"JARVIS_CONFIG": str(config)}


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_sandbox_run_cli(tmp_path: Path, roots: tuple[Path, Path]) -> None:
    env = write_config(tmp_path, roots)
    ro, _ = roots
    (ro / "in.txt").write_text("from the host")
    done = jarvis("sandbox", "run", "--mount", str(ro), "--", "python3", "-c",
                  f"import sys; print(open('{ro}/in.txt').read()); sys.exit(7)", env=env)  # fmt: skip
    assert done.returncode == 7, done.stderr
    assert done.stdout == "from the host\n"
    slow = jarvis(
        "sandbox", "run", "--timeout", "1", "--", "python3", "-c", "while 1: pass", env=env
    )
    assert slow.returncode == 124 and "timed out after 1s" in slow.stderr
    hog = jarvis("sandbox", "run", "--", "python3", "-c", "x = bytearray(1 << 30)", env=env)
    assert hog.returncode == 137 and "out of memory" in hog.stderr
    refused = jarvis("sandbox", "run", "--mount", "/", "--", "true", env=env)
    assert refused.returncode == 2 and "/ is refused" in refused.stderr


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_doctor_and_gc(tmp_path: Path, roots: tuple[Path, Path]) -> None:
    env = write_config(tmp_path, roots)
    done = jarvis("sandbox", "doctor", "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert {c["name"]: c["ok"] for c in report["checks"]}["policy"] is True
    gc = jarvis("sandbox", "gc", env=env)
    assert gc.returncode == 0 and "removed" in gc.stdout


def test_doctor_without_engine_says_what_to_do(tmp_path: Path) -> None:
    done = jarvis("sandbox", "doctor", env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    assert done.returncode == 3
    assert "FAIL engine" in done.stdout and "docker-up.sh" in done.stdout


def test_executor_seam_selects_the_sandbox(roots: tuple[Path, Path]) -> None:
    assert isinstance(executor_for(sandbox_config(roots)), DockerExecutor)
    assert isinstance(executor_for(sandbox_config(roots, backend="bwrap")), BwrapExecutor)


def run_bwrap(roots: tuple[Path, Path], code: str, timeout: float = 10, **kw: object) -> ExecResult:
    executor = BwrapExecutor(sandbox_config(roots, backend="bwrap"))
    mounts = kw.pop("mounts", ())
    request = ExecRequest(argv=["python3", "-c", code], timeout=timeout, mounts=mounts)  # type: ignore[arg-type]
    return asyncio.run(run_to_completion(executor, request))


@pytest.fixture
def bwrap() -> None:
    require(bwrap_path() is not None, "bubblewrap is not installed (apt-get install bubblewrap)")


@pytest.mark.usefixtures("bwrap")
def test_bwrap_contains() -> None:
    # As root, bubblewrap runs as the sandbox uid: mounts must be reachable by it
    # (pytest's own tmp directories are private to root).
    base = Path(tempfile.mkdtemp(prefix="jarvis-bwrap-test-"))
    base.chmod(0o755)
    try:
        _bwrap_contains((base, base))
    finally:
        shutil.rmtree(base)


def _bwrap_contains(roots: tuple[Path, Path]) -> None:
    ro, _rw = roots
    (ro / "d").mkdir()
    code = f"""
import os, socket, errno
try:
    socket.create_connection(("127.0.0.1", 22), timeout=1); print("CONNECTED")
except OSError as e:
    print("net", errno.errorcode.get(e.errno))
for p in ("/x", "/usr/x", "{ro}/d/x", "/opt/jarvis/jarvisd/x", "/tmp/ok"):
    try:
        open(p, "w").write("x"); print("WROTE", p)
    except OSError as e:
        print("refused", p)
print("uid", os.getuid(), "env", sorted(os.environ))
"""
    result = run_bwrap(roots, code, mounts=(str(ro / "d"),))
    assert result.ok, result
    assert "CONNECTED" not in result.stdout
    assert [ln for ln in result.stdout.splitlines() if ln.startswith("WROTE")] == ["WROTE /tmp/ok"]
    assert "uid 0 " not in result.stdout
    loop = run_bwrap(roots, "while True: pass", timeout=1)
    assert loop.timed_out and loop.reason == "timeout"
    with pytest.raises(MountRefused):
        run_bwrap(roots, "pass", mounts=("/",))


def test_backend_none_warns_on_every_run(
    roots: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    executor = executor_for(sandbox_config(roots, backend="none"))
    assert not executor.isolated
    request = ExecRequest(argv=[sys.executable, "-c", "print('hi')"], timeout=10)
    with caplog.at_level("WARNING", logger="jarvisd.executors"):
        for _ in range(3):
            assert asyncio.run(run_to_completion(executor, request)).stdout == "hi\n"
    warnings = [r for r in caplog.records if "NOT isolated" in r.getMessage()]
    assert len(warnings) == 3
    assert all(r.levelname == "WARNING" for r in warnings)


def test_engine_address_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    from jarvisd._config import Config, SandboxConfig
    from jarvisd.sandbox import engine_address

    for var in ("DOCKER_HOST", "CONTAINER_HOST"):
        monkeypatch.delenv(var, raising=False)
    assert engine_address(Config()) == ""  # the SDK's default socket
    monkeypatch.setenv("CONTAINER_HOST", "unix:///c.sock")
    assert engine_address(Config(), "podman") == "unix:///c.sock"
    assert engine_address(Config(), "docker") == ""
    monkeypatch.setenv("DOCKER_HOST", "unix:///d.sock")
    assert engine_address(Config(), "podman") == "unix:///d.sock"
    configured = Config(sandbox=SandboxConfig(docker_host="unix:///cfg.sock"))
    assert engine_address(configured) == "unix:///cfg.sock"
    assert engine_address(configured, "podman") == "unix:///cfg.sock"


# Run inside bwrap: what the escape calls answer.
_ESCAPE_CALLS = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def said(r):
    return "allowed" if r == 0 else errno.errorcode.get(ctypes.get_errno())
print("unshare(CLONE_NEWUSER)", said(libc.unshare(0x10000000)))
print("mount", said(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)))
print("ptrace", said(libc.ptrace(0, 0, None, None)))  # PTRACE_TRACEME
print("keyctl", said(libc.syscall(250 if os.uname().machine == "x86_64" else 219, 0, 0, 0)))
"""


@pytest.mark.usefixtures("bwrap")
def test_bwrap_seccomp_and_no_nested_user_namespaces(monkeypatch: pytest.MonkeyPatch) -> None:
    import struct

    from jarvisd.sandbox import _bwrap

    base = Path(tempfile.mkdtemp(prefix="jarvis-bwrap-test-"))
    base.chmod(0o755)
    try:
        result = run_bwrap((base, base), _ESCAPE_CALLS)
        assert result.ok, result
        lines = dict(line.rsplit(" ", 1) for line in result.stdout.splitlines())
        assert lines == {"unshare(CLONE_NEWUSER)": "EPERM", "mount": "EPERM",
                         "ptrace": "EPERM", "keyctl": "EPERM"}, result.stdout  # fmt: skip
        # Without the filter, --disable-userns alone still refuses a user namespace
        # (the limit, ENOSPC), while the rest goes through to the kernel.
        allow_all = struct.pack("=HBBI", 0x06, 0, 0, 0x7FFF0000)
        monkeypatch.setattr(_bwrap, "seccomp_program", lambda: allow_all)
        unfiltered = run_bwrap((base, base), _ESCAPE_CALLS)
        assert "unshare(CLONE_NEWUSER) ENOSPC" in unfiltered.stdout, unfiltered
        assert "keyctl EPERM" not in unfiltered.stdout, unfiltered
    finally:
        shutil.rmtree(base)


@pytest.mark.usefixtures("bwrap")
def test_bwrap_refuses_a_mount_swapped_after_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    base = Path(tempfile.mkdtemp(prefix="jarvis-bwrap-test-"))
    base.chmod(0o755)
    try:
        root, outside = base / "root", base / "outside"
        (root / "x").mkdir(parents=True)
        outside.mkdir()
        (outside / "secret.txt").write_text("SECRET")
        executor = BwrapExecutor(sandbox_config((root, root), backend="bwrap"))
        check = executor.mounts.check

        def check_then_swap(request: str) -> object:
            mount = check(request)
            (root / "x").rename(root / "x.real")
            (root / "x").symlink_to(outside)
            return mount

        monkeypatch.setattr(executor.mounts, "check", check_then_swap)
        request = ExecRequest(
            argv=["python3", "-c", f"print(open('{root}/x/secret.txt').read())"],
            timeout=10, mounts=(str(root / "x"),),
        )  # fmt: skip
        with pytest.raises(MountRefused, match="not the directory or file the host checked"):
            asyncio.run(run_to_completion(executor, request))
    finally:
        shutil.rmtree(base)
