"""The escape suite, against a real container engine: every attempt is contained and
ends with a clear result."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jarvisd._errors import MountRefused
from jarvisd.executors import ExecRequest, ExecResult, run_to_completion
from jarvisd.sandbox import LABEL, DockerChannel, DockerExecutor, connect
from jarvisd.sandbox._policy import OWNER_LABEL

from .conftest import sandbox_config

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("engine")]


def run_py(
    roots: tuple[Path, Path],
    code: str,
    *,
    timeout: float = 20.0,
    mounts: tuple[str, ...] = (),
    **overrides: object,
) -> ExecResult:
    executor = DockerExecutor(sandbox_config(roots, **overrides))
    request = ExecRequest(argv=["python3", "-c", code], timeout=timeout, mounts=mounts)
    try:
        return asyncio.run(run_to_completion(executor, request))
    finally:
        executor.close()


def our_containers() -> list[dict[str, object]]:
    from jarvisd._config import Config

    client = connect(Config())
    try:
        found = client.api.containers(all=True, filters={"label": f"{LABEL}=1"})
    finally:
        client.close()
    mine = f"{socket.gethostname()}:{os.getpid()}"
    return [c for c in found if (c.get("Labels") or {}).get(OWNER_LABEL) == mine]


def test_no_connection_to_a_host_listener(roots: tuple[Path, Path]) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.1)
    port = listener.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not accepted:
            try:
                accepted.append(listener.accept())
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    code = f"""
import socket, errno
for host in ("127.0.0.1", "10.0.2.2", "8.8.8.8"):
    try:
        socket.create_connection((host, {port}), timeout=2)
        print("CONNECTED", host)
    except OSError as e:
        print("blocked", host, errno.errorcode.get(e.errno, e.errno))
print(open("/proc/net/dev").read())
"""
    try:
        result = run_py(roots, code)
    finally:
        accepted.append(None) if not accepted else None
        thread.join()
        listener.close()
    assert result.ok, result
    assert "CONNECTED" not in result.stdout
    assert "blocked 127.0.0.1 ECONNREFUSED" in result.stdout
    assert "blocked 8.8.8.8 ENETUNREACH" in result.stdout
    interfaces = [line.split(":")[0].strip() for line in result.stdout.splitlines() if ":" in line]
    assert interfaces == ["lo"], result.stdout
    assert accepted == [None]  # the host listener never saw a connection


def test_no_dns(roots: tuple[Path, Path]) -> None:
    code = """
import socket
try:
    print("RESOLVED", socket.getaddrinfo("deb.debian.org", 80))
except OSError as e:
    print("dns failed:", type(e).__name__)
"""
    result = run_py(roots, code)
    assert result.ok, result
    assert "dns failed: gaierror" in result.stdout


def test_read_only_mount_and_nested_mount(roots: tuple[Path, Path]) -> None:
    ro, _rw = roots
    project = ro / "proj"
    nested = project / "nested"
    nested.mkdir(parents=True)
    (project / "data.txt").write_text("data")
    # A file system mounted under the allowed directory: `:ro` alone would leave it
    # writable inside the container on engine 20.10.
    mounted = (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0777", "tmpfs", str(nested)],
            capture_output=True,
        ).returncode
        == 0
    )
    code = f"""
import errno
for path in ("{project}/new.txt", "{project}/data.txt", "{nested}/x.txt"):
    try:
        with open(path, "w") as f:
            f.write("pwned")
        print("WROTE", path)
    except OSError as e:
        print("refused", path, errno.errorcode.get(e.errno, e.errno))
print("read", open("{project}/data.txt").read())
"""
    try:
        result = run_py(roots, code, mounts=(str(project),))
    finally:
        if mounted:
            subprocess.run(["umount", str(nested)], check=True)
    assert result.ok, result
    assert "WROTE" not in result.stdout
    assert f"refused {nested}/x.txt EROFS" in result.stdout
    assert f"refused {project}/new.txt EROFS" in result.stdout
    assert "read data" in result.stdout
    assert not (nested / "x.txt").exists()
    assert mounted or sys.platform != "linux" or os.geteuid() != 0


def test_rw_mount_only_where_allowed(roots: tuple[Path, Path]) -> None:
    _ro, rw = roots
    out = rw / "out"
    out.mkdir()
    out.chmod(0o777)
    result = run_py(roots, f"open('{out}/result.txt','w').write('ok')", mounts=(f"{out}:rw",))
    assert result.ok, result
    assert (out / "result.txt").read_text() == "ok"


def test_symlink_to_a_blocked_file_stays_outside(
    roots: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ro, _rw = roots
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SECRET-KEY-MATERIAL")
    (home / ".ssh" / "id_rsa").chmod(0o644)
    monkeypatch.setenv("HOME", str(home))
    project = ro / "proj"
    project.mkdir()
    (project / "notes").symlink_to(home / ".ssh" / "id_rsa")
    (project / "keys").symlink_to(home / ".ssh")
    # Mounting the link itself is refused (it resolves into .ssh)...
    with pytest.raises(MountRefused, match=r"\.ssh"):
        run_py(roots, "pass", mounts=(str(project / "notes"),))
    # ...and through the allowed directory the link points at nothing.
    code = f"""
for path in ("{project}/notes", "{project}/keys/id_rsa"):
    try:
        print("READ", open(path).read())
    except OSError as e:
        print("refused", path, type(e).__name__)
"""
    result = run_py(roots, code, mounts=(str(project),))
    assert result.ok, result
    assert "SECRET" not in result.stdout
    assert "refused" in result.stdout and "FileNotFoundError" in result.stdout


def test_fork_bomb_is_contained(roots: tuple[Path, Path]) -> None:
    code = """
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print("fork refused after", n, type(e).__name__)
"""
    result = run_py(roots, code, pids=64)
    assert result.ok, result
    assert "fork refused after" in result.stdout
    assert int(result.stdout.split()[3]) < 64
    # A recursive bomb that swallows the errors simply runs into the timeout.
    bomb = "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n"
    start = time.monotonic()
    result = run_py(roots, bomb, timeout=2, pids=64)
    assert result.timed_out and result.reason == "timeout"
    # A bound on a hang, not a speed target: the kill must not wait for the bomb to end
    # (it never does); a loaded CI machine may take several seconds to tear it down.
    assert time.monotonic() - start < 30
    assert not our_containers()


def test_memory_hog_gets_a_clear_oom(roots: tuple[Path, Path]) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 * 1024))\n"
    result = run_py(roots, code, memory="96m")
    assert result.reason == "oom", result
    assert result.exit_code == 137
    assert "out of memory" in result.stderr and "96 MiB" in result.stderr


def test_infinite_loop_times_out_and_the_container_is_gone(roots: tuple[Path, Path]) -> None:
    executor = DockerExecutor(sandbox_config(roots))

    async def scenario() -> tuple[ExecResult, float]:
        channel = await executor.open(
            ExecRequest(argv=["python3", "-c", "while True: pass"], timeout=1.0)
        )
        start = time.monotonic()
        result = await channel.wait()
        return result, time.monotonic() - start

    try:
        result, waited = asyncio.run(scenario())
    finally:
        executor.close()
    assert result.timed_out and result.reason == "timeout"
    assert "timed out after 1s" in result.stderr
    assert waited < 2.0  # deadline plus well under a second
    assert not our_containers()


def test_no_secrets_in_environment_or_argv(
    roots: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret-123")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-host-secret-456")
    code = """
import os
print(sorted(os.environ))
print(open("/proc/1/cmdline").read(), open("/proc/self/cmdline").read())
print(open("/proc/self/status").read())
"""
    result = run_py(roots, code)
    assert result.ok, result
    assert "secret" not in result.stdout.lower()
    environ = eval(result.stdout.splitlines()[0])
    assert set(environ) <= {"PATH", "HOME", "HOSTNAME", "LANG", "PYTHONPATH", "TMPDIR",
                            "PYTHONDONTWRITEBYTECODE", "LC_CTYPE"}  # fmt: skip
    status = result.stdout
    assert "CapEff:\t0000000000000000" in status
    assert "NoNewPrivs:\t1" in status
    assert "Uid:\t0" not in status


def test_writes_outside_tmp_fail(roots: tuple[Path, Path]) -> None:
    code = """
import errno
for path in ("/x", "/usr/lib/x", "/etc/passwd", "/opt/jarvis/jarvisd/x.py", "/home/x",
             "/var/tmp/x", "/tmp/ok"):
    try:
        with open(path, "a") as f:
            f.write("x")
        print("WROTE", path)
    except OSError as e:
        print("refused", path, errno.errorcode.get(e.errno, e.errno))
"""
    result = run_py(roots, code)
    assert result.ok, result
    lines = result.stdout.splitlines()
    assert "WROTE /tmp/ok" in lines
    assert [line for line in lines if line.startswith("WROTE")] == ["WROTE /tmp/ok"]


def test_container_carries_the_whole_policy(roots: tuple[Path, Path]) -> None:
    ro, rw = roots
    executor = DockerExecutor(sandbox_config(roots, pids=50, cpus=0.5))
    request = ExecRequest(argv=["python3", "-c", "import sys; sys.stdin.read()"], timeout=20,
                          mounts=(str(ro), f"{rw}:rw"))  # fmt: skip

    async def scenario() -> dict[str, Any]:
        channel = await executor.open(request)
        try:
            assert isinstance(channel, DockerChannel)
            return dict(await asyncio.to_thread(channel.api.inspect_container, channel.id))
        finally:
            await channel.kill()
            await channel.wait()

    try:
        info = asyncio.run(scenario())
    finally:
        executor.close()
    host, config = info["HostConfig"], info["Config"]
    assert host["NetworkMode"] == "none" and config.get("NetworkDisabled") is True
    assert host["ReadonlyRootfs"] is True and "/tmp" in host["Tmpfs"]
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Privileged"] is False and host["Init"] is True
    assert host["PidsLimit"] == 50 and host["NanoCpus"] == 500_000_000
    assert host["Memory"] == 128 << 20 and host["MemorySwap"] == 128 << 20
    assert config["User"] and not config["User"].startswith("0")
    assert config["Labels"][LABEL] == "1"
    assert not any("SECRET" in e or "KEY" in e for e in config["Env"])
    binds = {m["Target"]: m for m in host["Mounts"]}
    assert all(m["Type"] == "bind" for m in binds.values())
    assert all(m["BindOptions"] == {"NonRecursive": True} for m in binds.values())
    assert binds[str(ro)]["ReadOnly"] is True and not binds[str(rw)].get("ReadOnly")
    assert binds["/opt/jarvis/jarvisd"]["ReadOnly"] is True
    assert set(binds) == {str(ro), str(rw), "/opt/jarvis/jarvisd", "/opt/jarvis/runners"}


def test_missing_image_says_how_to_build(roots: tuple[Path, Path]) -> None:
    from jarvisd._errors import SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="jarvis sandbox build"):
        run_py(roots, "pass", image="jarvis-sandbox:does-not-exist")


@pytest.mark.slow
def test_fifty_runs_with_ten_timeouts_leave_no_container(roots: tuple[Path, Path]) -> None:
    executor = DockerExecutor(sandbox_config(roots))
    quick = ExecRequest(argv=["python3", "-c", "print('ok')"], timeout=20)
    stuck = ExecRequest(argv=["python3", "-c", "import time\nwhile True: time.sleep(1)"],
                        timeout=0.5)  # fmt: skip

    async def scenario() -> list[ExecResult]:
        gate = asyncio.Semaphore(3)

        async def one(request: ExecRequest) -> ExecResult:
            async with gate:
                return await run_to_completion(executor, request)

        requests = [stuck if i % 5 == 0 else quick for i in range(50)]
        return await asyncio.gather(*(one(r) for r in requests))

    try:
        results = asyncio.run(scenario())
    finally:
        executor.close()
    assert sum(r.timed_out for r in results) == 10
    assert sum(r.ok and r.stdout == "ok\n" for r in results) == 40
    assert not our_containers()


def test_sweep_removes_orphans_of_dead_owners(roots: tuple[Path, Path]) -> None:
    from jarvisd._config import Config
    from jarvisd.sandbox import sweep_orphans

    client = connect(Config())

    def create(owner: str) -> str:
        return str(
            client.api.create_container(
                "jarvis-sandbox:latest",
                ["python3", "-c", "pass"],
                labels={LABEL: "1", OWNER_LABEL: owner},
                host_config=client.api.create_host_config(network_mode="none"),
            )["Id"]
        )

    live = ""
    try:
        orphan = create(f"{socket.gethostname()}:999999999")
        live = create(f"{socket.gethostname()}:{os.getpid()}")
        removed = sweep_orphans(client=client)
        assert orphan in removed and live not in removed
        assert client.api.containers(all=True, filters={"id": orphan}) == []
        assert len(client.api.containers(all=True, filters={"id": live})) == 1
        # Through the config (its own connection, closed afterwards): still spared.
        assert live not in sweep_orphans(sandbox_config(roots))
    finally:
        with contextlib.suppress(Exception):
            client.api.remove_container(live, force=True)
        client.close()


def test_a_host_socket_in_a_mount_is_refused(roots: tuple[Path, Path]) -> None:
    """A process of the host (root, here) listening on a Unix socket with an innocent
    name inside an allowed directory: the mount is refused, the sandbox never connects."""
    ro, _rw = roots
    project = ro / "proj"
    project.mkdir()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(project / "agent.42"))
    listener.listen(1)
    listener.settimeout(0.1)
    code = f"""
import socket
s = socket.socket(socket.AF_UNIX)
s.connect("{project}/agent.42")
s.sendall(b"hello host")
print("CONNECTED")
"""
    try:
        with pytest.raises(MountRefused, match=r"the socket .*agent\.42"):
            run_py(roots, code, mounts=(str(project),))
        with pytest.raises(MountRefused, match=r"the socket .*agent\.42"):
            run_py(roots, code, mounts=(str(ro),))
        with pytest.raises(TimeoutError):
            listener.accept()  # nobody ever connected
    finally:
        listener.close()
    assert not our_containers()
