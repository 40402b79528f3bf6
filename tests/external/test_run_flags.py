"""The run's --temperature and --max-turns reach an external agent: its gateway holds
them whatever the agent asks (the scripted ACP agent asks for 0.9, twice)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from jarvisd._config import parse_config
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine
from jarvisd.runs import AgentSpec, run_spec


def test_temperature_and_max_turns_reach_an_external_agent(workspace: Path) -> None:
    from jarvisd.testing import acp_agent  # standard library only: run as a script

    command = [sys.executable, acp_agent.__file__, "infer"]
    config = parse_config({"agents": {"external": {"fake": {"command": command}}}})
    spec = AgentSpec(
        input="go", agent="fake", isolation="host", temperature=0.0, max_turns=1,
        options={"workspace": str(workspace)},
    )  # fmt: skip
    engine = ScriptedEngine.from_replies(["one", "two"])
    outcome = asyncio.run(run_spec(spec, RunContext(), config, engine, trace=False))
    assert [c.options.temperature for c in engine.calls] == [0.0]  # not the agent's 0.9
    assert outcome.failure is not None and outcome.failure.code == "budget", outcome
    assert "max turns (1)" in outcome.failure.message


def test_an_external_agent_run_is_traced_with_its_agent_and_input(workspace: Path) -> None:
    """Item 3: an ACP agent's run, even one that makes no model call, is in the trace
    store with its agent, input and answer, and no error."""
    from jarvisd.testing import acp_agent
    from jarvisd.traces import TraceStore

    command = [sys.executable, acp_agent.__file__, "work"]
    config = parse_config({"agents": {"external": {"fake": {"command": command}}}})
    spec = AgentSpec(input="go", agent="fake", isolation="host",
                     options={"workspace": str(workspace)})  # fmt: skip
    engine = ScriptedEngine.from_replies(["unused"])
    outcome = asyncio.run(run_spec(spec, RunContext(), config, engine))
    assert outcome.ok, outcome.failure
    (trace,) = TraceStore().list()
    assert (trace.agent, trace.input, trace.error) == ("fake", "go", "")
    assert trace.content == outcome.answer
