"""An MCP server written with the Python ``mcp`` SDK, in a sandboxed run: the SDK and
its dependencies installed into a directory (as ``pip install --target`` lays them
out), that directory mounted through the allowlist, the server run by the sandbox's
python3 with PYTHONPATH pointing there. The SDK holds
``mcp/server/auth/handlers/token.py``: the blocked name ``token*`` must tell that
source file from a token file."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from jarvisd._config import Config, McpConfig, McpServerConfig
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import AgentSpec, run_spec
from jarvisd.sandbox import MountPolicy

from .conftest import sandbox_config
from .test_escape import our_containers

SERVER = Path(__file__).resolve().parents[1] / "mcp" / "demo_server.py"


def install(distribution: str, target: Path) -> None:
    """``distribution`` and what it requires, installed into ``target`` from this
    environment's own files (each distribution's RECORD): what ``pip install --target``
    would lay out, without the network."""
    seen: set[tuple[str, str]] = set()
    todo = [(distribution, "")]
    while todo:
        name, extra = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if (key, extra) in seen:
            continue
        copied = any(k == key for k, _ in seen)
        seen.add((key, extra))
        dist = importlib.metadata.distribution(name)
        for file in () if copied else dist.files or ():
            source = Path(str(file.locate()))
            if not source.is_file() or ".." in file.parts:  # scripts live outside
                continue
            (target / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / file)
        for text in dist.requires or ():
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                todo.append((requirement.name, ""))
                todo.extend((requirement.name, wanted) for wanted in requirement.extras)


@pytest.fixture(scope="module")
def sdk_dir() -> Iterator[Path]:
    """An allowed root holding ``site`` (the SDK installed) and ``server.py``, readable
    by the sandbox user (as root, pytest's own tmp directories are private)."""
    base = Path(tempfile.mkdtemp(prefix="jarvis-mcp-sdk-"))
    try:
        base.chmod(0o755)
        directory = base / "server"
        install("mcp", directory / "site")
        shutil.copy(SERVER, directory / "server.py")
        for path in [directory, *directory.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield directory
    finally:
        shutil.rmtree(base)


def sdk_config(directory: Path, command: tuple[str, ...]) -> Config:
    server = McpServerConfig(
        command=command,
        env={"PYTHONPATH": str(directory / "site")},
        mounts=(str(directory),),
        startup_timeout=120,
    )
    rw = directory.parent / "rw"
    rw.mkdir(mode=0o777, exist_ok=True)
    config = sandbox_config((directory.parent, rw), memory="512m")
    return dataclasses.replace(config, mcp=McpConfig(servers={"sdk": server}))


def test_the_installed_sdk_is_mountable_though_it_holds_token_py(sdk_dir: Path) -> None:
    assert (sdk_dir / "site" / "mcp" / "server" / "auth" / "handlers" / "token.py").is_file()
    mount = MountPolicy([str(sdk_dir.parent)]).check(str(sdk_dir))
    assert mount.source == sdk_dir


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_a_server_built_on_the_mcp_sdk_runs_sandboxed_and_its_tool_is_called(
    sdk_dir: Path,
) -> None:
    engine = ScriptedEngine([reply("", ("sdk.add", {"a": 2, "b": 40})), reply("It is 42.")])
    config = sdk_config(sdk_dir, ("python3", str(sdk_dir / "server.py")))
    spec = AgentSpec(
        "What is 2 + 40?", agent="orchestrator", tools=("sdk.add",), isolation="sandbox"
    )
    outcome = asyncio.run(run_spec(spec, RunContext(), config, engine))
    assert outcome.failure is None, outcome.failure
    assert outcome.metadata["sandbox"]["backend"] == "docker"
    (result,) = outcome.tool_results
    assert (result.tool_name, result.content, result.success) == ("sdk.add", "42", True)
    assert outcome.answer == "It is 42."
    assert not our_containers()


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_a_venv_python_in_the_command_fails_with_how_to_run_it_in_the_sandbox(
    sdk_dir: Path,
) -> None:
    # What a user writes after `pip install mcp-server-time` into a venv.
    config = sdk_config(sdk_dir, ("/opt/venvs/time/bin/python", "-m", "mcp_server_time"))
    spec = AgentSpec(
        "What time is it?", agent="orchestrator", tools=("sdk.*",), isolation="sandbox"
    )
    outcome = asyncio.run(run_spec(spec, RunContext(), config, ScriptedEngine([])))
    assert outcome.failure is not None and outcome.failure.code == "tool", outcome.failure
    message = outcome.failure.message
    assert "No module named mcp_server_time" in message
    assert "Its python (/opt/venvs/time/bin/python) runs there as the sandbox's python3" in message
    assert "pip install --target DIR" in message and "PYTHONPATH=DIR" in message
    assert not our_containers()
