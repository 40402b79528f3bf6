"""SandboxedAgent's host side, without a container engine: what it sends the runner,
what budget it gives it, and how it checkpoints and resumes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from jarvisd._config import Config, SandboxConfig
from jarvisd._errors import SandboxError, SandboxUnavailable
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine
from jarvisd.executors import Channel, CodeExecutor, ExecRequest
from jarvisd.runs import AgentSpec, SandboxedAgent
from jarvisd.runs._sandboxed import CALLS_PER_TURN, default_budget


class NoEngine(CodeExecutor):
    """Records the request, then refuses to start anything."""

    request: ExecRequest | None = None

    async def open(self, request: ExecRequest) -> Channel:
        self.request = request
        raise SandboxUnavailable("no engine in this test")


def agent(executor: CodeExecutor | None = None, **config: Any) -> SandboxedAgent:
    sandbox = SandboxConfig(allowed_roots=("/srv/secret-root",), docker_host="unix:///x.sock")
    return SandboxedAgent(
        ScriptedEngine.from_replies([]), spec=AgentSpec(input="x", agent="simple"),
        config=Config(sandbox=sandbox, **config), executor=executor,
    )  # fmt: skip


def test_a_sandboxed_run_hands_its_program_the_state_it_resumes_from() -> None:
    # Issue 36: a sandboxed run resumes. The program's checkpoints are recorded whole
    # under the host's key, and a resume's start payload carries them back; a state
    # an older version wrote as not resumable is still refused with its reason.
    program = {"agent": "simple", "turns": 1, "messages": []}
    states: list[Any] = []
    with_record = RunContext(checkpoint=states.append)
    payload = agent()._payload("x", None, with_record)
    assert payload["checkpoints"] is True and payload["resume"] is None
    assert agent()._payload("x", None, RunContext())["checkpoints"] is False
    from jarvisd.runs._sandboxed import _program_state, _recorder

    record = _recorder(with_record, "sandboxed")
    assert record is not None and _recorder(RunContext(), "sandboxed") is None
    record(program)
    assert states == [{"agent": "sandboxed", "program": program}]
    resumed = _program_state(states[0], "sandboxed")
    assert agent()._payload("x", None, RunContext(), resume=resumed)["resume"] == program
    executor = NoEngine()
    with pytest.raises(SandboxUnavailable):
        asyncio.run(agent(executor).arun("x", run=RunContext(resume=states[0])))
    assert executor.request is not None and executor.request.separate_code
    old = {"agent": "sandboxed", "resumable": False, "reason": "cannot be resumed (old)"}
    with pytest.raises(SandboxError, match="cannot be resumed"):
        asyncio.run(agent(NoEngine()).arun("x", run=RunContext(resume=old)))


def test_the_start_payload_holds_only_the_config_the_runner_needs() -> None:
    payload = agent()._payload("x", None, RunContext())
    assert set(payload["config"]) == {"agent", "tools"}
    text = json.dumps(payload)
    assert "/srv/secret-root" not in text and "x.sock" not in text
    assert payload["config"]["tools"]["allow_network"] is False


def test_the_default_budget_follows_max_turns() -> None:
    budget = default_budget(max_turns=3, max_tokens=100)
    assert budget.max_calls == 3 * CALLS_PER_TURN
    assert budget.max_tokens is not None and budget.max_tokens > budget.max_calls * 100
