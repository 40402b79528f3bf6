"""A ``jarvis code`` setup under the bwrap backend (``sandbox.backend = "bwrap"``: no
container engine), through the CLI with a scripted engine: the venv is made in
bubblewrap with the host's python3, pip's local sources mounted read-only and the
setup's own egress proxy; the test command and the agent's CodeAct session see it at
/opt/jarvis-env, read-only, first on PATH; a second run takes it from the cache."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from jarvisd._config import Config, SandboxConfig
from jarvisd._paths import paths
from jarvisd._runcontext import RunContext
from jarvisd.cli import cli
from jarvisd.code import CodeStore, prepare
from jarvisd.engines import ScriptedEngine
from jarvisd.runs import AgentSpec, run_spec
from jarvisd.sandbox._bwrap import bwrap_path
from tests.conftest import require

from .conftest import FIXED
from .test_setup_sandbox import local_indexes_only

pytestmark = pytest.mark.slow


def _fix_block() -> str:
    pattern = f"{paths().state}/code/*/tree/calc.py"
    code = (
        "import glob, shutil, subprocess\n"
        "found = shutil.which('pytest')\n"
        "assert found == '/opt/jarvis-env/bin/pytest', found\n"
        "done = subprocess.run(['touch', '/opt/jarvis-env/x'], capture_output=True)\n"
        "assert done.returncode != 0, 'the environment is writable'\n"
        f"[path] = glob.glob({pattern!r})\n"
        f"open(path, 'w').write({FIXED!r})\n"
        "print('fixed')\n"
    )
    return f"```python\n{code}```"


def _run(ws_id: str, engine: ScriptedEngine) -> dict:  # type: ignore[type-arg]
    spec = AgentSpec(input="fix add", agent="native_openhands", workspace=ws_id)
    config = Config(sandbox=SandboxConfig(backend="bwrap"))
    asyncio.run(run_spec(spec, RunContext(), config, engine))
    return CodeStore(paths().state / "code.db").get(ws_id).outcome  # type: ignore[return-value]


def _workspace(project: Path) -> str:
    store = CodeStore(paths().state / "code.db")
    ws = prepare(str(project), store=store, state_dir=paths().state, task="fix add",
                 agent="native_openhands", test="python -m pytest -q")  # fmt: skip
    if os.geteuid() == 0:  # as a user's own would be: the sandbox's user reaches it
        for folder in (paths().state / "code", Path(ws.path).parent):
            folder.chmod(0o711)
    return ws.id


def test_setup_under_bwrap_makes_the_env_the_tests_and_the_agent_use(
    project: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    require(bwrap_path() is not None, "bubblewrap is not installed (apt-get install bubblewrap)")
    local_indexes_only(monkeypatch)
    config = Path(os.environ["JARVIS_CONFIG_DIR"]) / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[sandbox]\nbackend = "bwrap"\n')
    (project / "requirements.txt").write_text("iniconfig\n")
    if os.geteuid() == 0:
        # As root with jarvis's dirs closed to the sandbox's user: refused, saying why.
        result = CliRunner().invoke(cli, ["code", "run", "--no-daemon", str(project), "t"])
        assert result.exit_code == 2 and "cannot reach" in result.output, result.output
        assert 'use sandbox.backend = "docker"' in result.output
        # bwrap as root runs as the sandbox's user (10001), who must reach the workspace
        # and the environment to mount them: pytest's own dirs are 0700.
        base = Path(tempfile.mkdtemp(prefix="jarvis-bwrap-setup-"))
        request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
        base.chmod(0o711)
        for name in ("JARVIS_STATE_DIR", "JARVIS_CACHE_DIR"):
            monkeypatch.setenv(name, str(base / name.lower()))
        project = Path(shutil.copytree(project, base / "project", symlinks=True))

    engine = ScriptedEngine.from_replies([_fix_block(), "add adds now."])
    outcome = _run(_workspace(project), engine)
    setup = outcome["setup"]
    assert setup and setup["cached"] is False and setup["files"] == ["requirements.txt"], outcome
    assert "Successfully installed" in setup["output"]
    before, after = outcome["test_before"], outcome["test_after"]
    assert before["verdict"] == "failed" and "No module named" not in before["output"]
    assert "assert -1 == 5" in before["output"], before["output"][-800:]
    assert after["passed"], after["output"][-800:]
    assert outcome["files"] == [{"status": "M", "path": "calc.py"}]  # the env is not in it
    assert Path(setup["path"], "bin", "pytest").is_file()

    engine = ScriptedEngine.from_replies(["Nothing to change: I only looked."])
    again = _run(_workspace(project), engine)["setup"]
    assert again["cached"] is True and again["key"] == setup["key"]
