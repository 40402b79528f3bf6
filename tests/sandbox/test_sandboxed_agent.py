"""SandboxedAgent on a real engine: the agent runs in the container, its inference
comes back to a ScriptedEngine on the host over frames."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from jarvisd._messages import Generation, Message, ToolSpec
from jarvisd._runcontext import Budget, RunContext
from jarvisd.agents import AgentContext, AgentRegistry
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import AgentSpec, RunOutcome, SandboxedAgent, run_spec

from .conftest import sandbox_config
from .test_escape import our_containers

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("engine")]


def run_sandboxed(
    spec: AgentSpec,
    roots: tuple[Path, Path],
    engine: ScriptedEngine,
    run: RunContext | None = None,
    **overrides: object,
) -> RunOutcome:
    config = sandbox_config(roots, **overrides)
    return asyncio.run(run_spec(spec, run or RunContext(), config, engine))


def test_simple_agent_runs_in_the_container(roots: tuple[Path, Path]) -> None:
    engine = ScriptedEngine.from_replies(["the answer is 42"])
    run = RunContext()
    events: list[str] = []
    run.bus.subscribe(lambda e: events.append(e.type.value))
    spec = AgentSpec(input="what is the answer?", agent="simple", isolation="sandbox",
                     system_prompt="be brief")  # fmt: skip
    result = run_sandboxed(spec, roots, engine, run)
    assert result.answer == "the answer is 42"
    assert result.metadata["sandbox"]["backend"] == "docker"
    # The host engine saw the messages the agent built inside the container.
    assert [m.content for m in engine.calls[0].messages] == ["be brief", "what is the answer?"]
    assert events == ["agent_turn_start", "inference_start", "inference_end", "agent_turn_end"]
    assert run.budget.used.total_tokens > 0  # charged on the host
    assert not our_containers()


def test_waiting_for_inference_does_not_count_toward_the_sandbox_timeout(
    roots: tuple[Path, Path],
) -> None:
    # The host's model takes 4 s; the container may run 2.5 s of its own time.
    engine = ScriptedEngine.from_replies(["slow but fine"], latency_s=4.0)
    spec = AgentSpec(input="hi", agent="simple", isolation="sandbox")
    result = run_sandboxed(spec, roots, engine, timeout=2.5)
    assert result.answer == "slow but fine" and result.metadata["sandbox"]["duration_s"] > 4.0
    assert not our_containers()


def test_budget_stays_on_the_host(roots: tuple[Path, Path]) -> None:
    engine = ScriptedEngine.from_replies(["never sent"])
    run = RunContext(budget=Budget(max_calls=0))
    spec = AgentSpec(input="hi", agent="simple", isolation="sandbox")
    outcome = run_sandboxed(spec, roots, engine, run)
    assert outcome.failure is not None and outcome.failure.code == "budget"
    assert engine.calls == []
    assert not our_containers()


def test_cancel_kills_the_container(roots: tuple[Path, Path]) -> None:
    engine = ScriptedEngine.from_replies(["too late"], latency_s=30)
    run = RunContext()
    spec = AgentSpec(input="hi", agent="simple", isolation="sandbox")

    async def scenario() -> tuple[float, RunOutcome]:
        task = asyncio.ensure_future(run_spec(spec, run, sandbox_config(roots), engine))
        while not engine.calls:  # noqa: ASYNC110 - wait until the container asks for inference
            await asyncio.sleep(0.05)
        start = time.monotonic()
        run.cancel.cancel("user pressed stop")
        outcome = await task
        return time.monotonic() - start, outcome

    took, outcome = asyncio.run(scenario())
    assert took < 2.0
    assert outcome.failure is not None and outcome.failure.code == "cancelled"
    assert not our_containers()


def test_engine_errors_reach_the_caller(roots: tuple[Path, Path]) -> None:
    from jarvisd._errors import EngineError

    engine = ScriptedEngine(script=[EngineError("model exploded")])
    spec = AgentSpec(input="hi", agent="simple", isolation="sandbox")
    outcome = run_sandboxed(spec, roots, engine)
    assert outcome.failure is not None and outcome.failure.code == "engine"
    assert "model exploded" in outcome.failure.message


def test_mount_refused_before_anything_starts(roots: tuple[Path, Path], tmp_path: Path) -> None:
    engine = ScriptedEngine.from_replies(["x"])
    spec = AgentSpec(input="hi", agent="simple", isolation="sandbox", mounts=(str(tmp_path),))
    outcome = run_sandboxed(spec, roots, engine)
    assert outcome.failure is not None and outcome.failure.code == "mount_refused"
    assert outcome.exit_code == 2
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


# Code that prints where it runs: the uid and the network interfaces it can see.
WHERE = (
    "import os\n"
    "names = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]\n"
    "print('uid', os.getuid(), 'net', names)"
)


def code_reply(src: str) -> Generation:
    return reply(f"```python\n{src}\n```")


def test_codeact_in_the_sandbox_runs_its_code_in_the_container(roots: tuple[Path, Path]) -> None:
    engine = ScriptedEngine([code_reply(WHERE), reply("Final Answer: done")])
    spec = AgentSpec(input="where are you?", agent="native_openhands", isolation="sandbox")
    result = run_sandboxed(spec, roots, engine)
    assert result.answer == "done"
    assert result.metadata["sandbox"]["backend"] == "docker"
    shown = result.tool_results[0].content
    assert "net ['lo']" in shown, shown
    if os.getuid() == 0:
        assert "uid 0 " not in shown  # the sandbox user, not root
    assert not our_containers()


def test_rlm_in_the_sandbox_keeps_context_and_sub_calls(
    roots: tuple[Path, Path], tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("filler\n" * 200 + "the code is 7781\n")
    root = [
        code_reply(WHERE + "\nprint(len(context))\nprint(llm_query('code? ' + context[-40:]))"),
        code_reply("FINAL('7781')"),
    ]

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if messages[0].role.value == "system":
            return root.pop(0)
        return reply("sub says 7781" if "7781" in messages[-1].content else "none")

    engine = ScriptedEngine(fallback=answer)
    spec = AgentSpec(input="what is the code?", agent="rlm", isolation="sandbox",
                     context_file=str(notes))  # fmt: skip
    result = run_sandboxed(spec, roots, engine)
    assert result.answer == "7781"
    shown = result.tool_results[0].content
    assert "net ['lo']" in shown, shown
    assert str(len(notes.read_text())) in shown
    assert "sub says 7781" in shown  # the sub-call went out to the host engine and back
    assert len(engine.calls) == 3
    assert not our_containers()


@pytest.mark.parametrize("key", ["native_openhands", "rlm"])
def test_code_of_codeact_and_rlm_runs_in_the_sandbox_by_default(key: str) -> None:
    # No executor given: the agent picks one from the config (default backend docker).
    engine = ScriptedEngine([code_reply(WHERE), reply("Final Answer: done")])
    if key == "rlm":
        engine = ScriptedEngine([code_reply(WHERE), code_reply("FINAL('done')")])
    agent = AgentRegistry.create(key, engine, "scripted", temperature=0)
    result = asyncio.run(agent.arun("where?", AgentContext(metadata={"context": "abc"})))
    assert result.content == "done"
    shown = result.tool_results[0].content
    assert "net ['lo']" in shown, shown
    if os.getuid() == 0:
        assert "uid 0 " not in shown
    if key == "native_openhands":
        assert result.metadata["executor"] == "docker"
    assert not our_containers()
