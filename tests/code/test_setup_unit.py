"""The setup of a ``jarvis code`` run without a container: pip's host configuration
read the way pip reads it, what a project's setup is, and the environment cache (a
fake executor stands for the sandbox): reused while the dependency files are the
same, made anew when one changes, nothing left by a failed setup, one entry for two
candidates that need it at once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from jarvisd._config import Config
from jarvisd._errors import SetupFailed, UsageError
from jarvisd.code._pipconf import PipSources, host_pip_sources
from jarvisd.code._setup import ENV_PATH, envs_dir, plan_setup, prepare_toolchain, run_env
from jarvisd.executors import Channel, Clock, CodeExecutor, ExecRequest, ExecResult


def test_pip_config_is_read_as_pip_reads_it(tmp_path: Path) -> None:
    etc = tmp_path / "xdg" / "pip"
    etc.mkdir(parents=True)
    (etc / "pip.conf").write_text(
        "[global]\nindex-url = https://mirror.example:8443/simple\ncert = /x.pem\n"
        "find-links = /opt/wheels\n[install]\nconstraint = /c.txt\n"
    )
    home = tmp_path / "home"
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text(
        "[global]\ncert = /ca.pem\nextra_index_url = file:///srv/idx/simple\n"
        "  http://lan.example/simple\n"
    )
    environ = {"XDG_CONFIG_DIRS": str(tmp_path / "xdg"), "PIP_TRUSTED_HOST": "lan.example"}
    sources = host_pip_sources(environ, home)
    assert sources.index_url == "https://mirror.example:8443/simple"
    assert sources.extra_index_urls == ("file:///srv/idx/simple", "http://lan.example/simple")
    assert sources.constraints == ("/c.txt",) and sources.cert == "/ca.pem"
    assert sources.trusted_hosts == ("lan.example",)
    assert sources.hosts() == ("mirror.example:8443", "lan.example:80")
    env = sources.env()
    assert env["PIP_CONFIG_FILE"] == "/dev/null"  # the image's own pip config is ignored
    assert env["PIP_EXTRA_INDEX_URL"] == "file:///srv/idx/simple http://lan.example/simple"
    # A variable wins over the files; PIP_CONFIG_FILE that exists skips the user's file.
    named = tmp_path / "named.conf"
    named.write_text("[global]\nno-index = true\n")
    environ = {"XDG_CONFIG_DIRS": str(tmp_path / "xdg"), "PIP_CONFIG_FILE": str(named),
               "PIP_INDEX_URL": "https://other.example/simple"}  # fmt: skip
    sources = host_pip_sources(environ, home)
    assert sources.index_url == "https://other.example/simple"
    assert sources.extra_index_urls == () and sources.no_index and sources.hosts() == ()
    # Nothing configured: PyPI, with the host it serves files from.
    assert host_pip_sources({"XDG_CONFIG_DIRS": str(tmp_path / "none")}, tmp_path).hosts() == (
        "pypi.org:443",
        "files.pythonhosted.org:443",
    )


def test_local_sources_are_mounted_never_the_root(tmp_path: Path) -> None:
    index = tmp_path / "pypi" / "simple"
    index.mkdir(parents=True)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    cert = tmp_path / "ca.pem"
    cert.write_text("x")
    sources = PipSources(extra_index_urls=(f"file://{index}", "file:///"),
                         find_links=(str(wheels), "/nonexistent"), cert=str(cert))  # fmt: skip
    # An index's parent: its pages link to ../../files beside it.
    assert dict(sources.binds()) == {str(tmp_path / "pypi"): str(tmp_path / "pypi"),
                                     str(wheels): str(wheels), str(cert): str(cert)}  # fmt: skip


def test_what_setup_a_project_gets(tmp_path: Path) -> None:
    assert plan_setup(str(tmp_path)) is None  # not a Python project: none
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\n[project.optional-dependencies]\ntest = ["x"]\ndocs = ["y"]\n'
        'dev = ["z"]\n'
    )
    (tmp_path / "requirements-dev.txt").write_text("iniconfig\n")
    plan = plan_setup(str(tmp_path))
    assert plan is not None and plan.target == ".[test,dev]"
    assert plan.requirements == ("requirements-dev.txt",)
    assert plan.pip_line == "pip install -r requirements-dev.txt .[test,dev] pytest"
    assert plan_setup(str(tmp_path), enabled=False) is None  # --no-setup
    assert plan_setup(str(tmp_path), "make deps", enabled=False).command == "make deps"  # type: ignore[union-attr]
    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / "setup.cfg").write_text("[options.extras_require]\ntesting = pytest-mock\n")
    assert plan_setup(str(tmp_path)).target == ".[testing]"  # type: ignore[union-attr]
    (tmp_path / "requirements;rm -rf x.txt").write_text("")
    with pytest.raises(UsageError, match="requirements file name"):
        plan_setup(str(tmp_path))
    env = run_env(str(tmp_path))
    assert env["PATH"].startswith(f"{ENV_PATH}/bin:") and env["PYTHONPATH"] == str(tmp_path)
    (tmp_path / "src").mkdir()
    assert run_env(str(tmp_path))["PYTHONPATH"] == f"{tmp_path}:{tmp_path}/src"


class _Done(Channel):
    """A program that printed ``lines`` and exited with ``code``."""

    def __init__(self, lines: Sequence[bytes], code: int, gate: asyncio.Event | None) -> None:
        self.clock = Clock(30.0)
        self.lines, self.code, self.gate = list(lines), code, gate

    async def write(self, data: bytes) -> None:
        pass

    async def close_stdin(self) -> None:
        pass

    async def readline(self, limit: int = 0) -> bytes:
        if self.gate is not None:
            await self.gate.wait()
        return self.lines.pop(0) if self.lines else b""

    async def _reap(self) -> ExecResult:
        return ExecResult(self.code)

    async def kill(self, reason: str = "killed") -> None:
        pass


class _Sandbox(CodeExecutor):
    """Stands for the sandbox: writes a file into the env mount, as a venv would."""

    def __init__(self, code: int = 0, gate: asyncio.Event | None = None) -> None:
        self.requests: list[ExecRequest] = []
        self.code, self.gate = code, gate

    async def open(self, request: ExecRequest) -> Channel:
        self.requests.append(request)
        host = next(h for h, inside, _ in request.system_binds if inside == ENV_PATH)
        (Path(host) / "pyvenv.cfg").write_text(f"built by request {len(self.requests)}\n")
        (Path(host) / "bin").mkdir()
        (Path(host) / "bin" / "su").write_text("")
        (Path(host) / "bin" / "su").chmod(0o6755)  # a build may set these on its files
        return _Done([b"Collecting x\n", b"jarvis setup: done\n"], self.code, self.gate)


def _prepare(ws: Path, sandbox: _Sandbox, lines: list[str] | None = None, project: str = "") -> Any:
    plan = plan_setup(str(ws))
    assert plan is not None
    say = lines.append if lines is not None else (lambda line: None)
    return prepare_toolchain(plan, str(ws), Config(), sandbox, say, sources=PipSources(
        index_url="file:///nonexistent/simple"), project=project or str(ws))  # fmt: skip


def test_the_cache_is_reused_and_invalidated_by_a_dependency_file(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "setup.py").write_text("from setuptools import setup\nsetup(name='p')\n")
    (ws / "p.py").write_text("x = 1\n")
    sandbox = _Sandbox()
    lines: list[str] = []
    first = asyncio.run(_prepare(ws, sandbox, lines))
    assert not first.cached and len(sandbox.requests) == 1 and "Collecting x" in lines
    request = sandbox.requests[0]
    # Built read-write under a temporary name, renamed when complete.
    [(building, _, read_only)] = [b for b in request.system_binds if b[1] == ENV_PATH]
    assert not read_only and Path(building).parent == Path(first.path).parent
    assert not Path(building).exists()
    assert request.mounts == (str(ws),)  # the workspace: read-only
    assert request.proxy_socket  # a proxy that allows nothing: refusals are named
    assert Path(first.path, "pyvenv.cfg").read_text() == "built by request 1\n"
    assert first.binds() == ((first.path, ENV_PATH, True),)  # later runs: read-only
    assert Path(first.path, "bin", "su").stat().st_mode & 0o7777 == 0o755
    # Source files are not dependency files: the same environment.
    (ws / "p.py").write_text("x = 2\n")
    again = asyncio.run(_prepare(ws, sandbox))
    assert again.cached and again.key == first.key and len(sandbox.requests) == 1
    # A dependency file changed: a new environment, the old one is not touched.
    (ws / "setup.py").write_text("from setuptools import setup\nsetup(name='p', version='2')\n")
    changed = asyncio.run(_prepare(ws, sandbox))
    assert not changed.cached and changed.key != first.key and len(sandbox.requests) == 2
    assert Path(first.path, "pyvenv.cfg").read_text() == "built by request 1\n"
    assert sorted(p.name for p in envs_dir().iterdir()) == sorted([first.key, changed.key])
    # Another project with the same dependency files: not served this one's build.
    other = asyncio.run(_prepare(ws, sandbox, project="/elsewhere"))
    assert not other.cached and other.key != changed.key


def test_a_failed_setup_leaves_no_cache_entry(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("nothing-such\n")
    with pytest.raises(SetupFailed, match=r"exit 1.*\n(.|\n)*Collecting x"):
        asyncio.run(_prepare(tmp_path, _Sandbox(code=1)))
    assert list(envs_dir().iterdir()) == []


def test_candidates_making_one_environment_at_once_build_it_once(tmp_path: Path) -> None:
    """--candidates N: N runs with one key at once. One builds; the others wait for it
    and take it from the cache (never N builds, never one over another)."""
    (tmp_path / "requirements.txt").write_text("iniconfig\n")
    lines: list[str] = []

    async def three() -> list[Any]:
        gate = asyncio.Event()
        sandbox = _Sandbox(gate=gate)
        runs = [asyncio.ensure_future(_prepare(tmp_path, sandbox, lines)) for _ in range(3)]
        while not sandbox.requests:  # noqa: ASYNC110 - the first is building
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.6)  # the others poll the lock meanwhile
        assert len(sandbox.requests) == 1
        gate.set()
        done = list(await asyncio.gather(*runs))
        assert len(sandbox.requests) == 1
        return done

    made = asyncio.run(three())
    assert len({t.path for t in made}) == 1 and len({t.key for t in made}) == 1
    assert sorted(t.cached for t in made) == [False, True, True]
    assert sum("being made by another run: waiting" in line for line in lines) == 2
    assert [p.name for p in envs_dir().iterdir()] == [made[0].key]  # no build left behind
    assert Path(made[0].path, "pyvenv.cfg").read_text() == "built by request 1\n"


def test_setup_options_on_the_command_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from jarvisd.cli import cli
    from jarvisd.cli._task import format_event

    result = CliRunner().invoke(cli, ["code", "run", str(tmp_path), "fix", "--setup", "make",
                                      "--no-setup"])  # fmt: skip
    assert isinstance(result.exception, UsageError)  # the top-level handler: exit 2
    assert "--setup and --no-setup disagree" in str(result.exception)
    # A daemon task's log shows the setup's lines, escaped (they come from the sandbox).
    line = format_event(3, "code_setup", {"line": "Collecting x\x1b[2J"})
    assert line == "[3] setup: Collecting x\\x1b[2J"


def test_an_index_token_never_enters_the_sandbox() -> None:
    """A private index's user and password stay on the host: the setup runs the
    project's build code in the sandbox, which could read them from its environment."""
    token = "s3cr3t-index-token"
    sources = PipSources(
        index_url=f"https://__token__:{token}@pypi.example/simple",
        extra_index_urls=(f"https://me:{token}@other.example:8443/simple",),
        find_links=(f"http://{token}@links.example/", "/opt/wheels"),
    )
    env = sources.env()
    assert token not in " ".join(env.values()), env
    assert env["PIP_INDEX_URL"] == "https://pypi.example/simple"
    assert env["PIP_EXTRA_INDEX_URL"] == "https://other.example:8443/simple"
    assert env["PIP_FIND_LINKS"] == "http://links.example/ /opt/wheels"
    assert sources.hosts() == ("pypi.example:443", "other.example:8443", "links.example:80")
