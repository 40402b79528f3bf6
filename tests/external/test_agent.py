"""External agents through the run contract (``run_spec`` -> RunOutcome): a config
agent (the scripted ACP agent) on the host and in the sandbox, the run's gateway
reachable, its outcome shaped like every other agent's."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from jarvisd._config import Config, parse_config
from jarvisd._events import Event
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine
from jarvisd.runs import AgentSpec, RunOutcome, run_spec

from .conftest import MARKER
from .test_sandboxed import IMAGE, _docker_ok


def _config(scenario: str, workspace: Path, *, python: str, **sandbox: object) -> Config:
    command = [python, "-m", "jarvisd.testing.acp_agent", scenario]
    return parse_config({
        "agents": {"external": {"fake": {"command": command}}, "permissions": {"edit": "deny"}},
        "sandbox": {"allowed_roots": [f"{workspace.parent}:rw"], **sandbox},
    })  # fmt: skip


def _run(spec: AgentSpec, config: Config) -> tuple[RunOutcome, list[str], list[Event]]:
    deltas: list[str] = []
    events: list[Event] = []
    run = RunContext(on_delta=deltas.append)
    run.bus.subscribe(events.append)
    engine = ScriptedEngine.from_replies(["unused"])
    outcome = asyncio.run(run_spec(spec, run, config, engine, trace=False))
    return outcome, deltas, events


def test_a_config_agent_runs_on_the_host_through_the_run_contract(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    config = _config("work", workspace, python=sys.executable)
    spec = AgentSpec(
        input="go", agent="fake", isolation="host", options={"workspace": str(workspace)}
    )
    outcome, deltas, _ = _run(spec, config)
    assert outcome.ok, outcome.failure
    assert outcome.answer == f"read: {MARKER}; edit: denied"  # after its last tool call
    assert "".join(deltas) == "Reading. " + outcome.answer  # all of it streamed
    assert outcome.agent == "fake"
    assert outcome.tool_results[0].content == MARKER
    assert outcome.metadata["sandboxed"] is False
    assert "NOT isolated" in caplog.text  # the warning of every --no-sandbox run


def test_a_config_agent_reaches_the_gateway_from_the_sandbox(workspace: Path) -> None:
    from tests.conftest import require

    require(_docker_ok(), "needs a container engine (DOCKER_HOST)")
    os.chmod(workspace, 0o777)
    config = _config("gateway", workspace, python="python3", image=IMAGE)
    spec = AgentSpec(input="go", agent="fake", options={"workspace": str(workspace)})
    outcome, _, _ = _run(spec, config)
    assert outcome.ok, outcome.failure
    assert outcome.answer.startswith("HTTP/1.")
    assert outcome.metadata["sandboxed"] is True
