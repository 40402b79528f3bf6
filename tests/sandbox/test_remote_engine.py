"""A container engine reached over TCP with TLS client certificates (issue 33): a second
private dockerd, started here, that only takes clients with a certificate of its CA.

What a user does: ``[sandbox] docker_host = "tcp://HOST:PORT"`` and ``docker_tls = DIR``,
then ``jarvis sandbox run`` and code agents' sessions work as on the local socket. What
jarvis refuses: a tcp:// engine beyond loopback without certificates (before a byte is
sent); the engine itself refuses clients without a certificate of its CA."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jarvisd._config import Config, SandboxConfig
from jarvisd._errors import SandboxUnavailable
from tests.conftest import require

from .conftest import engine_problem
from .tls_engine import TlsEngine, client_dir, make_ca, start_tls_engine

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def tls_engine() -> Iterator[TlsEngine]:
    problem = engine_problem()
    require(not problem, problem)
    require(os.geteuid() == 0, "a second dockerd needs root")
    require(bool(shutil.which("dockerd") or os.path.exists("/usr/sbin/dockerd")), "no dockerd")
    require(bool(shutil.which("openssl")), "no openssl")
    image = SandboxConfig().image
    engine = start_tls_engine(image, {"DOCKER_HOST": os.environ.get("DOCKER_HOST", "")})
    yield engine
    engine.stop()


def _config(engine: TlsEngine, tls: Path | None) -> Config:
    return Config(
        sandbox=SandboxConfig(docker_host=engine.address, docker_tls=str(tls) if tls else "")
    )


def _jarvis(
    config_file: Path, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "JARVIS_CONFIG": str(config_file)}
    env.pop("DOCKER_HOST", None)  # the config names the engine
    return subprocess.run(
        [sys.executable, "-m", "jarvisd", *args], input=stdin, capture_output=True, env=env,
        timeout=300,
    )  # fmt: skip


def test_a_tcp_engine_beyond_loopback_without_certificates_is_refused_before_connecting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing listens at 192.0.2.1 (TEST-NET-1): a refusal that came from a connection
    attempt would say "no container engine answers" instead, after a timeout."""
    from jarvisd.sandbox import connect

    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    config = Config(sandbox=SandboxConfig(docker_host="tcp://192.0.2.1:2375"))
    with pytest.raises(
        SandboxUnavailable, match=r"refused the container engine at tcp://192\.0\.2\.1"
    ):
        connect(config, timeout=1)
    empty = tmp_path / "tls"
    empty.mkdir()
    (empty / "ca.pem").write_text("x")
    config = Config(
        sandbox=SandboxConfig(docker_host="tcp://192.0.2.1:2376", docker_tls=str(empty))
    )
    with pytest.raises(SandboxUnavailable, match=r"lacks cert\.pem, key\.pem"):
        connect(config, timeout=1)
    conf = tmp_path / "config.toml"
    conf.write_text('[sandbox]\ndocker_host = "tcp://192.0.2.1:2375"\n')
    done = _jarvis(conf, "sandbox", "run", "--", "true")
    assert done.returncode != 0
    assert b"refused the container engine" in done.stderr, done.stderr
    assert b"Traceback" not in done.stderr


def test_a_codeact_session_runs_on_the_tls_engine(
    tls_engine: TlsEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two cells share their variables. REQUESTS_CA_BUNDLE (set system-wide on many
    machines, and on this one) must not replace the engine's CA."""
    from jarvisd.agents._repl import ReplSession
    from jarvisd.sandbox import DockerExecutor

    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    executor = DockerExecutor(_config(tls_engine, tls_engine.certs))

    async def go() -> tuple[str, str]:
        repl = ReplSession(executor, exec_timeout=60, session_timeout=300)
        try:
            first = await repl.execute("x = 6 * 7\nprint(x)")
            second = await repl.execute("import os\nprint(x + 1, os.getuid())")
        finally:
            await repl.close()
            executor.close()
        return first.stdout, second.stdout

    first, second = asyncio.run(go())
    assert first.strip() == "42"
    assert second.split()[0] == "43" and second.split()[1] != "0"


def test_jarvis_sandbox_run_reads_all_its_input_on_the_tls_engine(
    tls_engine: TlsEngine, tmp_path: Path
) -> None:
    """The program reads its stdin to the end: the end of input must reach it through
    the TLS stream, and its output still come back."""
    conf = tmp_path / "config.toml"
    conf.write_text(
        f'[sandbox]\ndocker_host = "{tls_engine.address}"\ndocker_tls = "{tls_engine.certs}"\n'
    )
    program = "import sys; data = sys.stdin.read(); print(len(data), data.count('line'))"
    done = _jarvis(conf, "sandbox", "run", "--", "python3", "-c", program,
                   stdin=b"line\n" * 5000)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [b"25000", b"5000"], done.stdout


def test_the_tls_engine_refuses_clients_without_a_certificate_of_its_ca(
    tls_engine: TlsEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jarvisd.sandbox import connect

    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    # Loopback without certificates: jarvis lets it through, the engine says no.
    with pytest.raises(SandboxUnavailable, match="no container engine answers"):
        connect(_config(tls_engine, None), timeout=10)
    # A client certificate from another CA: the TLS handshake fails.
    other = tmp_path / "other"
    other.mkdir()
    make_ca(other, "other")
    shutil.copy(tls_engine.certs.parent / "engine-ca.pem", other / "engine-ca.pem")
    stranger = client_dir(other, "other", "stranger")
    with pytest.raises(SandboxUnavailable, match="no container engine answers"):
        connect(_config(tls_engine, stranger), timeout=10)
    # The right one works.
    connect(_config(tls_engine, tls_engine.certs), timeout=10).close()


def test_an_engine_on_another_machine_is_refused_with_what_works_instead(tmp_path: Path) -> None:
    """Its host paths are not ours: the bind mounts of jarvis's code could not work.
    Refused before any connection (nothing listens at 192.0.2.1)."""
    conf = tmp_path / "config.toml"
    tls = tmp_path / "tls"
    tls.mkdir()
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tls / name).write_text("unused")
    conf.write_text(f'[sandbox]\ndocker_host = "tcp://192.0.2.1:2376"\ndocker_tls = "{tls}"\n')
    done = _jarvis(conf, "sandbox", "run", "--", "true")
    assert done.returncode != 0
    assert b"may be on another machine" in done.stderr, done.stderr
    assert b"Traceback" not in done.stderr
