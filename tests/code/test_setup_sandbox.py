"""A real project no one here wrote, on a real container engine, through the CLI, with a
scripted engine: the ``inflection`` 0.5.1 sdist from PyPI with ``dasherize`` broken.
Its setup (detected: a venv with the project's dependencies and pytest) runs in the
sandbox; the test before fails on a real assertion, the agent's CodeAct session has
the env's pytest first on PATH, the test after passes, the env is not in the diff, a
second run's setup comes from the cache, and a setup that reaches for a host it may
not reach fails naming it, before any agent starts."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from jarvisd._paths import paths
from jarvisd.cli import cli
from jarvisd.engines import ScriptedEngine
from jarvisd.runs import _execute
from tests.conftest import IN_CI, require
from tests.sandbox.conftest import engine_problem

from .conftest import git

pytestmark = pytest.mark.docker

SDIST = "inflection-0.5.1.tar.gz"
SDIST_SHA256 = "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417"
#: Downloaded once per machine (CI's bare machine too), outside the isolated dirs.
SDIST_CACHE = Path.home() / ".cache" / "jarvis-tests"
GOOD = "return word.replace('_', '-')"
BROKEN = "return word.replace('-', '_')"
TEST = "python3 -m pytest -q test_inflection.py"


@pytest.fixture(scope="session")
def sdist() -> Path:
    """The sdist, pinned by its hash; under CI a failed download fails the test."""
    path = SDIST_CACHE / SDIST
    if not path.is_file():
        SDIST_CACHE.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "inflection==0.5.1", "-d", str(SDIST_CACHE)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if done.returncode != 0 and IN_CI:
            pytest.fail(f"could not download {SDIST}: {done.stderr[-2000:]}", pytrace=False)
        require(done.returncode == 0, f"could not download {SDIST}: {done.stderr[-500:]}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == SDIST_SHA256, f"{path} is not the {SDIST} of PyPI"
    return path


@pytest.fixture
def inflection(sdist: Path, tmp_path: Path) -> Path:
    """The sdist as a git repository, ``dasherize`` inverted."""
    root = tmp_path / "inflection"
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path, filter="data")
    (tmp_path / "inflection-0.5.1").rename(root)
    shutil.rmtree(root / "inflection.egg-info")
    source = root / "inflection" / "__init__.py"
    text = source.read_text()
    assert text.count(GOOD) == 1
    source.write_text(text.replace(GOOD, BROKEN))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "inflection 0.5.1, dasherize broken")
    return root


@pytest.fixture(autouse=True)
def container_engine() -> None:
    problem = engine_problem()
    require(not problem, problem)


def local_indexes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip's sources as on the host, without its HTTP indexes: the test reaches no
    host (the CI machines serve the packages from local indexes, as this one)."""
    from jarvisd.code._pipconf import host_pip_sources

    local = [u for u in host_pip_sources().indexes if u.startswith("file:")]
    require(bool(local), "pip on this machine has no file:// index to install from")
    monkeypatch.setenv("PIP_INDEX_URL", local[0])
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", " ".join(local[1:]))


def code_run(project: Path, engine: ScriptedEngine, monkeypatch: Any, *args: str) -> Any:
    monkeypatch.setattr(_execute, "select_engine", lambda *a, **kw: engine)
    argv = ["code", "run", "--no-daemon", "--json", str(project), "fix dasherize",
            "--agent", "native_openhands", "--test", TEST, *args]  # fmt: skip
    return CliRunner().invoke(cli, argv)


def fix_block() -> str:
    """The CodeAct fix, checking first that the session has the env's pytest."""
    pattern = f"{paths().state}/code/*/tree/inflection/__init__.py"
    code = (
        "import glob, shutil\n"
        "found = shutil.which('pytest')\n"
        "assert found == '/opt/jarvis-env/bin/pytest', found\n"
        f"[path] = glob.glob({pattern!r})\n"
        "text = open(path).read()\n"
        f"open(path, 'w').write(text.replace({BROKEN!r}, {GOOD!r}))\n"
        "print('fixed')\n"
    )
    return f"```python\n{code}```"


def test_inflection_is_set_up_in_the_sandbox_and_fixed(
    inflection: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local_indexes_only(monkeypatch)
    engine = ScriptedEngine.from_replies([fix_block(), "dasherize replaces '_' with '-' now."])
    result = code_run(inflection, engine, monkeypatch)
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    outcome = record["outcome"]
    setup = outcome["setup"]
    assert setup["cached"] is False and setup["files"] == ["setup.cfg", "setup.py"]
    assert "Successfully installed" in setup["output"]
    assert "uninstalling inflection" in setup["output"]  # the workspace's source is tested
    before, after = outcome["test_before"], outcome["test_after"]
    assert not before["passed"] and "No module named" not in before["output"]
    assert "2 failed, 453 passed" in before["output"], before["output"][-1500:]
    assert "test_dasherize[street_address-street-address]" in before["output"]
    assert after["passed"], after["output"][-1500:]
    # The env is never part of the change: one file changed, nothing of the venv.
    assert outcome["files"] == [{"status": "M", "path": "inflection/__init__.py"}]
    assert "jarvis-env" not in outcome["diff"] and GOOD in outcome["diff"]
    env = Path(setup["path"])
    assert env.parent == paths().cache / "envs" and (env / "bin" / "pytest").is_file()
    assert not list(env.parent.glob(".build-*"))
    assert not any(p.name.startswith("inflection") for p in env.glob("lib/*/site-packages/*"))

    # A second run on the same project: its setup comes from the cache.
    engine = ScriptedEngine.from_replies(["Nothing to change: I only looked."])
    again = code_run(inflection, engine, monkeypatch, "--test", "python3 -m pytest -q -x")
    second = json.loads(again.stdout)["outcome"]["setup"]
    assert second["cached"] is True and second["key"] == setup["key"], again.output
    assert "from the cache" in again.stderr


def test_a_setup_that_reaches_a_host_it_may_not_fails_naming_it(
    inflection: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reach = (
        "python3 -c \"import urllib.request as u; u.urlopen('https://evil.example/x', timeout=60)\""
    )
    engine = ScriptedEngine.from_replies(["never asked"])
    result = code_run(inflection, engine, monkeypatch, "--setup", reach)
    assert result.exit_code == 1, result.output
    assert "setup_failed" in result.stderr and "refused evil.example:443" in result.stderr
    assert not engine.calls  # the agent never started
    outcome = json.loads(result.stdout)["outcome"]
    assert outcome["failure"]["code"] == "setup_failed"
    assert outcome["test_before"] is None and outcome["files"] == []
    assert [p.name for p in (paths().cache / "envs").iterdir()] == []  # nothing cached
