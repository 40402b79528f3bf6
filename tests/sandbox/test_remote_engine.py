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
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jarvisd._config import Config, SandboxConfig
from jarvisd._errors import SandboxUnavailable
from jarvisd.sandbox._policy import OWNER_LABEL, SANDBOX_GID, SANDBOX_UID
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


def _remote(engine: TlsEngine, root: Path | None = None) -> Config:
    """The TLS engine as if it were on another machine: ``docker_remote`` is the switch a
    port forwarded from elsewhere needs (its address is loopback), and the test seam
    here. Nothing of this machine's files reaches it but through archives."""
    roots = (f"{root}:rw",) if root else ()
    return Config(
        sandbox=SandboxConfig(docker_host=engine.address, docker_tls=str(engine.certs),
                              docker_remote=True, allowed_roots=roots, memory="256m")
    )  # fmt: skip


def _leftovers(engine: TlsEngine, wait: float = 60) -> list[str]:
    """The sandbox's volumes and containers on the engine, once they are gone or after
    ``wait`` seconds (a run's volume is removed in the background after it ends)."""
    deadline = time.monotonic() + wait
    while True:
        out = []
        for kind in ("volume", "container"):
            args = ["ls", "-q"] if kind == "volume" else ["ls", "-aq"]
            listed = subprocess.run(engine.cli(kind, *args, "--filter", "label=jarvis.sandbox"),
                                    capture_output=True, text=True, check=True)  # fmt: skip
            out += listed.stdout.split()
        if not out or time.monotonic() > deadline:
            return out
        time.sleep(0.5)


def test_a_sandboxed_run_with_an_rw_mount_travels_as_archives(
    tls_engine: TlsEngine, tmp_path: Path
) -> None:
    """``jarvis sandbox run --mount DIR:rw`` on an engine that cannot see DIR: the tree
    goes in as an archive, the change comes back as a bind would have shown it (written,
    deleted, a link kept a link), but what would reach past the mount does not: a FIFO is
    not made, a planted ``.env`` is not written, the host's target of a link the sandbox
    made is untouched. No volume or container stays on the engine."""
    root = tmp_path / "allowed"
    ws = root / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "a.txt").write_text("A")
    (ws / "gone.txt").write_text("x")
    (ws / "sub" / "k.py").write_text("k")
    for path in (ws, ws / "sub", ws / "a.txt", ws / "gone.txt", ws / "sub" / "k.py"):
        os.chown(path, SANDBOX_UID, SANDBOX_GID)  # owners travel as a bind shows them
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("safe")
    conf = tmp_path / "config.toml"
    cfg = _remote(tls_engine, root).sandbox
    conf.write_text(
        f'[sandbox]\ndocker_host = "{cfg.docker_host}"\ndocker_tls = "{cfg.docker_tls}"\n'
        f'docker_remote = true\nallowed_roots = ["{root}:rw"]\n'
    )
    program = (
        f"import os; os.chdir({str(ws)!r}); print(open('a.txt').read(), sorted(os.listdir('.')),"
        f" os.path.exists({str(outside)!r})); open('b.txt', 'w').write('B');"
        " open('a.txt', 'a').write('2'); os.remove('gone.txt'); os.mkfifo('fifo');"
        f" os.symlink({str(outside / 'victim')!r}, 'link'); open('.env', 'w').write('K=planted')"
    )
    done = _jarvis(conf, "sandbox", "run", "--mount", f"{ws}:rw", "--", "python3", "-c", program)
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.decode().split() == ["A", "['a.txt',", "'sub']", "False"]
        or done.stdout.decode().strip() == "A ['a.txt', 'gone.txt', 'sub'] False"
    ), done.stdout
    assert sorted(os.listdir(ws)) == ["a.txt", "b.txt", "link", "sub"]
    assert (ws / "a.txt").read_text() == "A2" and (ws / "b.txt").read_text() == "B"
    assert os.readlink(ws / "link") == str(outside / "victim")
    assert (outside / "victim").read_text() == "safe"
    assert b"not written back" in done.stderr and b".env" in done.stderr
    assert _leftovers(tls_engine) == []


def test_an_env_file_added_after_the_mount_check_never_reaches_the_engine(
    tls_engine: TlsEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mount check refuses a tree holding ``.env``; one written after the check (a
    race with the user's own tools) is left out of the archive all the same."""
    from jarvisd.executors import ExecRequest
    from jarvisd.sandbox import DockerExecutor

    root = tmp_path / "allowed"
    ws = root / "ws"
    ws.mkdir(parents=True)
    (ws / "a.py").write_text("a")
    executor = DockerExecutor(_remote(tls_engine, root))
    check_all = executor.mounts.check_all

    def then_a_secret(requests: list[str]) -> object:
        checked = check_all(requests)
        (ws / ".env").write_text("API_KEY=hunter2")
        (ws / "deploy.pem").write_text("-----BEGIN PRIVATE KEY-----")
        return checked

    monkeypatch.setattr(executor.mounts, "check_all", then_a_secret)
    program = f"import os; print(sorted(os.listdir({str(ws)!r})))"

    async def go() -> str:
        channel = await executor.open(
            ExecRequest(argv=["python3", "-c", program], mounts=(str(ws),), timeout=60)
        )
        result = await channel.wait()
        assert result.exit_code == 0, result.stderr
        return result.stdout

    try:
        assert asyncio.run(go()).strip() == "['a.py']"
    finally:
        executor.close()


def test_a_codeact_session_runs_on_a_remote_engine(tls_engine: TlsEngine) -> None:
    """jarvis's own code reaches the engine as an archive too: the REPL runs from it."""
    from jarvisd.agents._repl import ReplSession
    from jarvisd.sandbox import DockerExecutor

    executor = DockerExecutor(_remote(tls_engine))
    assert executor.archives

    async def go() -> tuple[str, str]:
        repl = ReplSession(executor, exec_timeout=60, session_timeout=300)
        try:
            first = await repl.execute("x = 6 * 7\nprint(x)")
            second = await repl.execute("import jarvisd, os\nprint(x + 1, jarvisd.__file__)")
        finally:
            await repl.close()
            executor.close()
        return first.stdout, second.stdout

    first, second = asyncio.run(go())
    assert first.strip() == "42"
    assert second.split() == ["43", "/opt/jarvis/jarvisd/__init__.py"] or second.split()[0] == "43"
    assert _leftovers(tls_engine) == []


def test_jarvis_code_on_a_remote_engine_fixes_applies_and_never_sends_env(
    tls_engine: TlsEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workspace travels as an archive and its change comes back: the diff is the
    fix, apply makes the project's test pass; the project's .env is in no archive."""
    from jarvisd._paths import paths
    from jarvisd._runcontext import RunContext
    from jarvisd.code import CodeStore, apply, prepare
    from jarvisd.engines import ScriptedEngine
    from jarvisd.runs import AgentSpec, run_spec
    from jarvisd.sandbox import _docker
    from tests.code.conftest import CALC, FIXED, TEST, git

    shipped: list[str] = []
    ship = _docker.ship

    def spy(*args: object) -> object:
        shipment = ship(*args)  # type: ignore[arg-type]
        shipped.extend(str(m.source) for m, _arc, _sent in shipment.writable)
        return shipment

    monkeypatch.setattr(_docker, "ship", spy)
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    (project / "calc.py").write_text(CALC)
    (project / "test_calc.py").write_text(TEST)
    git(project, "add", "-A")
    git(project, "commit", "-qm", "init")
    (project / ".env").write_text("API_KEY=hunter2\n")
    store = CodeStore(paths().state / "code.db")
    test = "python3 -c 'import test_calc as t; t.test_add()'"
    ws = prepare(str(project), store=store, state_dir=paths().state, task="fix it", test=test)
    fix = (
        f"import os\nprint('ENV', os.path.lexists({ws.path + '/.env'!r}))\n"
        f"open({ws.path + '/calc.py'!r}, 'w').write({FIXED!r})"
    )
    engine = ScriptedEngine.from_replies([f"```python\n{fix}\n```", "it adds now."])
    spec = AgentSpec(input="fix the failing test", agent="native_openhands", workspace=ws.id)
    outcome = asyncio.run(run_spec(spec, RunContext(), _remote(tls_engine), engine))
    assert outcome.ok, outcome.failure
    assert "ENV False" in engine.calls[1].messages[-1].content
    assert shipped == [str(Path(ws.path).resolve())]  # as an archive, not a bind
    code = outcome.metadata["code"]
    assert code["files"] == [{"status": "M", "path": "calc.py"}]
    assert code["test_before"]["passed"] is False, code
    assert code["test_after"]["passed"] is True, (code["test_after"], code["test_before"])
    apply(ws.id, store, paths().state)
    assert (project / "calc.py").read_text() == FIXED
    assert (project / ".env").read_text() == "API_KEY=hunter2\n"
    assert _leftovers(tls_engine) == []


def test_what_a_crash_leaves_on_the_engine_is_swept(tls_engine: TlsEngine) -> None:
    """A run's volume and loader, labelled with an owner that is gone (jarvisd killed
    between the load and the removal), go with the daemon's sweep at start."""
    from jarvisd.sandbox import sweep_orphans

    labels = ["--label", "jarvis.sandbox=1", "--label", f"{OWNER_LABEL}=gone-host:999999999"]
    made = subprocess.run(tls_engine.cli("volume", "create", *labels, "jarvis-sandbox-x-files"),
                          capture_output=True, text=True)  # fmt: skip
    assert made.returncode == 0, made.stderr
    loader = subprocess.run(
        tls_engine.cli("create", *labels, "--network", "none", "--read-only", "-v",
                       "jarvis-sandbox-x-files:/x", SandboxConfig().image, "true"),
        capture_output=True, text=True,
    )  # fmt: skip
    assert loader.returncode == 0, loader.stderr
    removed = sweep_orphans(_remote(tls_engine))
    assert "jarvis-sandbox-x-files" in removed and loader.stdout.strip() in removed
    assert _leftovers(tls_engine) == []


def test_what_needs_this_machine_is_refused_on_an_engine_elsewhere(tmp_path: Path) -> None:
    """Network access goes through a proxy's socket on this machine: an engine elsewhere
    cannot bind it. Refused with the reason, before any connection (192.0.2.1)."""
    conf = tmp_path / "config.toml"
    tls = tmp_path / "tls"
    tls.mkdir()
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tls / name).write_text("unused")
    conf.write_text(f'[sandbox]\ndocker_host = "tcp://192.0.2.1:2376"\ndocker_tls = "{tls}"\n')
    done = _jarvis(conf, "sandbox", "run", "--allow-net", "example.com", "--", "true")
    assert done.returncode != 0
    assert b"cannot reach this machine's sockets" in done.stderr, done.stderr
    assert b"Traceback" not in done.stderr
