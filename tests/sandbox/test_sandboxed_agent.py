"""SandboxedAgent on a real engine: the agent runs in the container, its inference
comes back to a ScriptedEngine on the host over frames."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from jarvisd._run import Budget, BudgetExceeded, Cancelled, RunContext
from jarvisd.engines import ScriptedEngine
from jarvisd.runtime import AgentSpec, run_agent
from jarvisd.sandbox import SandboxedAgent

from .conftest import sandbox_config
from .test_escape import our_containers

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("engine")]


def test_simple_agent_runs_in_the_container(roots: tuple[Path, Path]) -> None:
    engine = ScriptedEngine.from_replies(["the answer is 42"])
    run = RunContext()
    events: list[str] = []
    run.bus.subscribe(lambda e: events.append(e.type.value))
    spec = AgentSpec(input="what is the answer?", agent="simple", sandbox=True,
                     system_prompt="be brief")  # fmt: skip
    result = asyncio.run(run_agent(spec, run, config=sandbox_config(roots), engine=engine))
    assert result.content == "the answer is 42"
    assert result.metadata["sandbox"]["backend"] == "docker"
    # The host engine saw the messages the agent built inside the container.
    assert [m.content for m in engine.calls[0].messages] == ["be brief", "what is the answer?"]
    assert events == ["agent_turn_start", "inference_start", "inference_end", "agent_turn_end"]
    assert run.budget.used.total_tokens > 0  # charged on the host
    assert not our_containers()


def test_budget_stays_on_the_host(roots: tuple[Path, Path]) -> None:
    engine = ScriptedEngine.from_replies(["never sent"])
    run = RunContext(budget=Budget(max_calls=0))
    spec = AgentSpec(input="hi", agent="simple", sandbox=True)
    with pytest.raises(BudgetExceeded):
        asyncio.run(run_agent(spec, run, config=sandbox_config(roots), engine=engine))
    assert engine.calls == []
    assert not our_containers()


def test_cancel_kills_the_container(roots: tuple[Path, Path]) -> None:
    engine = ScriptedEngine.from_replies(["too late"], latency_s=30)
    run = RunContext()
    spec = AgentSpec(input="hi", agent="simple", sandbox=True)

    async def scenario() -> float:
        task = asyncio.ensure_future(run_agent(spec, run, config=sandbox_config(roots),
                                               engine=engine))  # fmt: skip
        while not engine.calls:  # noqa: ASYNC110 - wait until the container asks for inference
            await asyncio.sleep(0.05)
        start = time.monotonic()
        run.cancel.cancel("user pressed stop")
        with pytest.raises(Cancelled):
            await task
        return time.monotonic() - start

    assert asyncio.run(scenario()) < 2.0
    assert not our_containers()


def test_engine_errors_reach_the_caller(roots: tuple[Path, Path]) -> None:
    from jarvisd._errors import EngineError

    engine = ScriptedEngine(script=[EngineError("model exploded")])
    spec = AgentSpec(input="hi", agent="simple", sandbox=True)
    with pytest.raises(EngineError, match="model exploded"):
        asyncio.run(run_agent(spec, config=sandbox_config(roots), engine=engine))


def test_mount_refused_before_anything_starts(roots: tuple[Path, Path], tmp_path: Path) -> None:
    from jarvisd._errors import MountRefused

    engine = ScriptedEngine.from_replies(["x"])
    spec = AgentSpec(input="hi", agent="simple", sandbox=True, mounts=(str(tmp_path),))
    with pytest.raises(MountRefused):
        asyncio.run(run_agent(spec, config=sandbox_config(roots), engine=engine))
    assert engine.calls == []


def test_agent_reads_a_mounted_directory(roots: tuple[Path, Path]) -> None:
    ro, _rw = roots
    data = ro / "data"
    data.mkdir()
    (data / "report.txt").write_text("quarterly numbers")
    engine = ScriptedEngine.from_replies(["done"])
    agent = SandboxedAgent(
        engine,
        spec=AgentSpec(input="x", agent="simple", mounts=(str(data),)),
        config=sandbox_config(roots),
    )
    assert asyncio.run(agent.arun("summarise")).content == "done"
