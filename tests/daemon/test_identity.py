"""Daemon identity (issue 11, item 6): a runtime directory, a socket or a pid that
another user planted must not stand in for jarvisd, for the daemon or for its clients."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jarvisd._errors import DaemonError, DaemonUnavailable
from jarvisd.cli._daemon import stop_daemon
from jarvisd.daemon import Client, DaemonPaths, ExitCode
from jarvisd.daemon._identity import is_jarvisd_command, read_pid_file
from tests.conftest import require

NOBODY = 65534


def runtime_dir() -> Path:
    return Path(os.environ["JARVIS_RUNTIME_DIR"])


def run_daemon() -> subprocess.CompletedProcess[str]:
    """Start a real jarvisd in the foreground; these tests expect it to refuse at once."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "jarvisd.daemon"], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired as exc:  # killed by run()
        raise AssertionError(
            f"jarvisd served from an unsafe runtime dir:\n{exc.stderr!r}"
        ) from None


def jarvis(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvisd", *args],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def assert_refused(runtime: Path, problem: str) -> None:
    """Both sides refuse ``runtime``, with one line naming ``problem``."""
    with pytest.raises(DaemonError, match=problem) as caught:
        Client(timeout=5).ping()
    assert not isinstance(caught.value, DaemonUnavailable)
    assert "\n" not in str(caught.value)
    done = run_daemon()
    assert done.returncode == ExitCode.UNSAFE_RUNTIME_DIR, done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "refusing the jarvisd runtime directory" in errors[0], done.stderr
    assert problem in errors[0]


def test_runtime_dir_owned_by_another_uid_is_refused() -> None:
    require(os.geteuid() == 0, "needs root to give the runtime directory to another uid")
    runtime = runtime_dir()
    os.chown(runtime, NOBODY, NOBODY)
    assert_refused(runtime, f"owned by uid {NOBODY}")
    assert os.listdir(runtime) == []  # no socket, no pid file written into it
    assert runtime.stat().st_uid == NOBODY


def test_symlinked_runtime_dir_is_refused_and_not_followed(
    isolated_dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = isolated_dirs / "elsewhere"
    target.mkdir(mode=0o700)
    link = isolated_dirs / "run-link"
    link.symlink_to(target)
    monkeypatch.setenv("JARVIS_RUNTIME_DIR", str(link))
    assert_refused(link, "is a symlink")
    assert os.listdir(target) == []


def test_runtime_dir_open_to_others_is_refused_not_chmod_ed() -> None:
    runtime = runtime_dir()
    runtime.chmod(0o755)
    assert_refused(runtime, "has mode 0755, not 0700")
    assert runtime.stat().st_mode & 0o777 == 0o755


def test_missing_runtime_dir_is_created_private(
    isolated_dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = isolated_dirs / "fresh" / "run"
    monkeypatch.setenv("JARVIS_RUNTIME_DIR", str(runtime))
    with pytest.raises(DaemonUnavailable):  # nothing there yet: not an identity problem
        Client(timeout=5).ping()
    from jarvisd.daemon._identity import check_private_dir

    check_private_dir(runtime, create=True)
    assert runtime.stat().st_mode & 0o777 == 0o700


# -- a fake daemon of another uid on our socket --------------------------------------

# Runs as uid 65534 on a socket root bound: SO_PEERCRED reports the uid that called
# listen(), so clients see a server of uid 65534, as if that user had planted it.
_FAKE_SERVER = """
import socket, sys
server = socket.socket(fileno=int(sys.argv[1]))
server.listen(1)
print("listening", flush=True)
conn, _ = server.accept()
conn.settimeout(30)
received = b""
while chunk := conn.recv(65536):
    received += chunk
print("received", len(received), flush=True)
"""


@pytest.fixture
def foreign_server() -> Iterator[subprocess.Popen[str]]:
    require(os.geteuid() == 0, "needs root to run a server as another uid")
    python = shutil.which("python3", path="/usr/bin:/bin")
    require(python is not None, "needs a system python3 that uid 65534 may execute")
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(DaemonPaths.default().socket))
    proc = subprocess.Popen(
        [str(python), "-I", "-c", _FAKE_SERVER, str(sock.fileno())],
        pass_fds=[sock.fileno()], user=NOBODY, group=NOBODY, extra_groups=[],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    sock.close()
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "listening"
    yield proc
    proc.kill()
    proc.wait(10)
    proc.stdout.close()


def test_client_refuses_a_daemon_of_another_uid(foreign_server: subprocess.Popen[str]) -> None:
    with pytest.raises(DaemonError, match=f"served by uid {NOBODY}, not by this user"):
        Client(timeout=5).ping()
    # The request never left: the fake read nothing before the client hung up.
    assert foreign_server.stdout is not None
    assert foreign_server.stdout.readline().split() == ["received", "0"]


def test_jarvis_ask_refuses_a_daemon_of_another_uid(
    foreign_server: subprocess.Popen[str],
) -> None:
    result = jarvis("ask", "secret prompt")
    assert result.returncode == 1
    assert f"served by uid {NOBODY}" in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert foreign_server.stdout is not None
    assert foreign_server.stdout.readline().split() == ["received", "0"]


# -- the pid file --------------------------------------------------------------------


def spawn(argv0: str, *, user: int | None = None) -> subprocess.Popen[bytes]:
    """A ``sleep`` whose command line starts with ``argv0``, reaped as soon as it ends
    (an unreaped child would still look alive to the caller)."""
    sleep = shutil.which("sleep")
    assert sleep is not None
    proc = subprocess.Popen([argv0, "300"], executable=sleep, user=user)
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc


def write_pid(pid: int) -> Path:
    pid_file = DaemonPaths.default().pid_file
    pid_file.write_text(f"{pid}\n")
    return pid_file


def test_stop_refuses_a_pid_file_naming_another_program() -> None:
    victim = spawn("sleep")
    try:
        pid_file = write_pid(victim.pid)
        result = jarvis("daemon", "stop", "--timeout", "5")
        assert result.returncode == 1, result.stderr
        assert f"not signalling pid {victim.pid} from {pid_file}" in result.stderr
        assert "'sleep 300'" in result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert victim.poll() is None  # alive: never signalled
        with pytest.raises(DaemonError, match="not a jarvisd of this user"):
            stop_daemon(timeout=5)  # the same for `daemon restart`, which stops first
        assert victim.poll() is None
    finally:
        victim.kill()


def test_stop_refuses_a_jarvisd_of_another_uid() -> None:
    require(os.geteuid() == 0, "needs root to run a process as another uid")
    victim = spawn("jarvisd", user=NOBODY)
    try:
        write_pid(victim.pid)
        with pytest.raises(DaemonError, match=f"uid {NOBODY}, command 'jarvisd 300'"):
            stop_daemon(timeout=5)
        assert victim.poll() is None
    finally:
        victim.kill()


def test_stop_signals_a_silent_jarvisd_of_ours() -> None:
    """The control: a jarvisd of ours that does not answer on the socket is stopped by
    SIGTERM through the pid file, as before."""
    daemon = spawn("jarvisd")
    try:
        write_pid(daemon.pid)
        assert stop_daemon(timeout=30) == daemon.pid
        assert daemon.wait(10) == -signal.SIGTERM
    finally:
        daemon.kill()


def test_pid_file_is_not_read_through_a_symlink(isolated_dirs: Path) -> None:
    elsewhere = isolated_dirs / "pid"
    elsewhere.write_text(f"{os.getpid()}\n")
    pid_file = DaemonPaths.default().pid_file
    pid_file.symlink_to(elsewhere)
    assert read_pid_file(pid_file) is None
    pid_file.unlink()
    pid_file.write_text(f"{os.getpid()}\n")
    assert read_pid_file(pid_file) == os.getpid()
    for junk in ("", "-1", "12x", "١٢", "0"):
        pid_file.write_text(junk)
        assert read_pid_file(pid_file) is None, junk


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/venv/bin/jarvisd"], True),
        (["/venv/bin/python", "/venv/bin/jarvisd", "--log-level", "INFO"], True),
        (["python3", "-m", "jarvisd.daemon"], True),
        (["python3", "-I", "-mjarvisd.daemon"], True),
        (["python3", "-m", "jarvisd.daemonx"], False),
        (["python3", "evil.py", "jarvisd"], False),
        (["sleep", "300"], False),
        (["python3", "-c", "import jarvisd"], False),
        ([], False),
    ],
)
def test_is_jarvisd_command(argv: list[str], expected: bool) -> None:
    assert is_jarvisd_command(argv) is expected
