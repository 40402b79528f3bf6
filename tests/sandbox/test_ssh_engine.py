"""A container engine reached over ssh (issue 33): ``[sandbox] docker_host =
"ssh://USER@HOST"``. The docker SDK runs the ``ssh`` program, so the user's keys and known
hosts decide; on the far side ``docker system dial-stdio`` talks to the engine there.

Here the far side is a private sshd on a free loopback port, with its own host key and a
key that may do one thing only (a forced command: dial-stdio to this machine's private
engine). The only test seam is an ``ssh`` first on PATH that adds ``-F`` with the test's
client config (its key and known-hosts file), as a user's ``~/.ssh/config`` would. An
ssh:// engine is always remote: the run's files travel as archives."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jarvisd.sandbox._policy import SANDBOX_GID, SANDBOX_UID
from tests.conftest import require

from .conftest import engine_problem

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@dataclass(frozen=True)
class SshEngine:
    address: str
    env: dict[str, str]  # PATH with the ssh that reads the test's client config
    log: Path

    def sessions(self) -> int:
        """Logins sshd accepted so far."""
        return self.log.read_text(errors="replace").count("Accepted publickey")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def ssh_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshEngine]:
    problem = engine_problem()
    require(not problem, problem)
    sshd, docker = shutil.which("sshd") or "/usr/sbin/sshd", shutil.which("docker")
    require(os.path.exists(sshd), "no sshd (setup.sh --test installs openssh-server)")
    require(docker is not None, "no docker CLI for the far side's dial-stdio")
    engine = os.environ.get("DOCKER_HOST", "")
    d = tmp_path_factory.mktemp("ssh")
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)],
                       check=True)  # fmt: skip
    dial = (
        f"DOCKER_HOST={engine} exec {docker} system dial-stdio"
        if engine
        else f"exec {docker} system dial-stdio"
    )
    (d / "authorized_keys").write_text(
        f'command="{dial}",restrict {(d / "client_key.pub").read_text().strip()}\n'
    )
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\n"
        f"StrictModes no\nPidFile {d / 'sshd.pid'}\nLogLevel INFO\n"
    )
    (d / "ssh_config").write_text(
        f"Host *\n  IdentityFile {d / 'client_key'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {d / 'known_hosts'}\n  StrictHostKeyChecking accept-new\n"
        "  BatchMode yes\n"
    )
    wrapper = d / "bin" / "ssh"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {d / "ssh_config"} "$@"\n')
    wrapper.chmod(0o755)
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege separation directory
    log = d / "sshd.log"
    log.touch()
    server = subprocess.Popen([sshd, "-D", "-f", str(d / "sshd_config"), "-E", str(log)])
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "sshd did not listen"
            time.sleep(0.1)
    env = {**os.environ, "PATH": f"{wrapper.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("DOCKER_HOST", None)  # the config names the engine
    try:
        yield SshEngine(f"ssh://{getpass.getuser()}@127.0.0.1:{port}", env, log)
    finally:
        server.terminate()
        server.wait(30)


def _jarvis(engine: SshEngine, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jarvisd", *args], capture_output=True, text=True, timeout=300,
        env={**engine.env, "JARVIS_CONFIG": str(config)},
    )  # fmt: skip


def _volumes() -> set[str]:
    listed = subprocess.run(["docker", "volume", "ls", "-q", "--filter", "label=jarvis.sandbox"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    return set(listed.stdout.split())


def test_a_sandboxed_run_with_an_rw_mount_works_over_ssh(
    ssh_engine: SshEngine, tmp_path: Path
) -> None:
    """``jarvis sandbox run --mount DIR:rw`` on an ssh:// engine: it went through sshd
    (a login), the tree went in and the change came back as archives, and nothing of the
    run stays on the engine."""
    root = tmp_path / "allowed"
    ws = root / "ws"
    ws.mkdir(parents=True)
    (ws / "a.txt").write_text("A")
    for path in (ws, ws / "a.txt"):
        os.chown(path, SANDBOX_UID, SANDBOX_GID)
    config = tmp_path / "config.toml"
    config.write_text(
        f'[sandbox]\ndocker_host = "{ssh_engine.address}"\nallowed_roots = ["{root}:rw"]\n'
    )
    before, volumes = ssh_engine.sessions(), _volumes()
    program = (
        f"import os; os.chdir({str(ws)!r}); print(open('a.txt').read());"
        " open('b.txt', 'w').write('B'); open('a.txt', 'a').write('2')"
    )
    done = _jarvis(ssh_engine, config, "sandbox", "run", "--mount", f"{ws}:rw", "--",
                   "python3", "-c", program)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "A"
    assert (ws / "a.txt").read_text() == "A2" and (ws / "b.txt").read_text() == "B"
    assert ssh_engine.sessions() > before, "the run did not go through sshd"
    deadline = time.monotonic() + 60
    while (left := _volumes() - volumes) and time.monotonic() < deadline:
        time.sleep(0.5)  # a run's volume is removed in the background after it ends
    assert left == set()


def test_an_ssh_engine_without_paramiko_says_what_to_install(
    ssh_engine: SshEngine, tmp_path: Path
) -> None:
    """The docker SDK needs paramiko for any ssh:// engine; without it the user is told
    which extra to install, not that no engine answered."""
    shadow = tmp_path / "shadow" / "paramiko"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('paramiko is not installed')\n")
    config = tmp_path / "config.toml"
    config.write_text(f'[sandbox]\ndocker_host = "{ssh_engine.address}"\n')
    env = {**ssh_engine.env, "JARVIS_CONFIG": str(config),
           "PYTHONPATH": os.pathsep.join([str(shadow.parent), *sys.path])}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "jarvisd", "sandbox", "run", "--", "true"],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert done.returncode != 0
    assert "pip install 'jarvisd[ssh]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
