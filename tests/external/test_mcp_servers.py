"""MCP servers handed to ACP agents: a run naming ``SERVER.tool`` / ``SERVER.*`` gives
the agent those servers in ``session/new`` (with ``--no-sandbox``: the agent starts
them itself, and in its container their host commands do not exist, so a sandboxed
run refuses them). End to end: the real stdio server of tests/mcp reaches opencode,
opencode calls its tool on a scripted engine, and the tool's result reaches the answer."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from jarvisd._config import Config, parse_config
from jarvisd._errors import UsageError
from jarvisd._events import Event
from jarvisd._messages import Generation, Message, ToolSpec
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.external import BUILTIN, installed
from jarvisd.runs import AgentSpec, RunOutcome, run_spec, validate_spec
from tests.conftest import require
from tests.mcp.test_mcp import SERVER, demo_servers


def _config(**agents: object) -> Config:
    return parse_config({
        "mcp": {"servers": {"demo": {"command": [sys.executable, SERVER]}}},
        "agents": agents,
    })  # fmt: skip


def _run(spec: AgentSpec, config: Config, engine: ScriptedEngine) -> tuple[RunOutcome, list[Event]]:
    run = RunContext()
    events: list[Event] = []
    run.bus.subscribe(events.append)
    return asyncio.run(run_spec(spec, run, config, engine, trace=False)), events


def test_a_sandboxed_acp_agent_refuses_mcp_servers_with_the_fix() -> None:
    spec = AgentSpec(input="go", agent="opencode", tools=("demo.*",))
    with pytest.raises(UsageError, match="run it with --no-sandbox to hand it MCP servers"):
        validate_spec(spec, _config())


def test_an_acp_agent_jarvis_cannot_limit_takes_only_mcp_tools() -> None:
    spec = AgentSpec(input="go", agent="codex", tools=("demo.add", "calculator"),
                     isolation="host")  # fmt: skip
    with pytest.raises(UsageError, match=r"cannot limit them; it takes only MCP servers' "
                       r"tools .* not calculator"):  # fmt: skip
        validate_spec(spec, _config())


def test_opencode_takes_names_of_its_own_tools_beside_mcp_tools() -> None:
    from jarvisd.engines import ScriptedEngine
    from jarvisd.runs._build import build_agent

    spec = AgentSpec(input="go", agent="opencode", tools=("demo.add", "read", " grep"),
                     isolation="host")  # fmt: skip
    agent = build_agent(spec, _config(), ScriptedEngine())
    assert agent.own_tools == ("read", "grep")  # type: ignore[attr-defined]
    assert [s.name for s in agent.mcp_servers] == ["demo"]  # type: ignore[attr-defined]


def test_the_run_leaves_starting_the_servers_to_the_acp_agent() -> None:
    from jarvisd.runs._build import starts_mcp_servers

    config = _config()
    acp = AgentSpec(input="go", agent="opencode", tools=("demo.add",), isolation="host")
    assert validate_spec(acp, config) is not None
    assert not starts_mcp_servers(acp, config)  # opencode starts them itself
    assert starts_mcp_servers(AgentSpec(input="go", agent="orchestrator", tools=("demo.add",)),
                              config)  # fmt: skip


def test_the_named_servers_reach_session_new(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scripted ACP agent answers the servers it was handed. The server's command
    exits at once: had the run started it itself (as it does for built-in agents), the
    run would fail."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    command = [sys.executable, "-c", "raise SystemExit(1)"]
    config = parse_config({
        "mcp": {"servers": {"demo": {"command": command, "env": {"LOG": "warn"}},
                            "other": {"command": command}}},
        "agents": {"external": {"fake": {
            "command": [sys.executable, "-m", "jarvisd.testing.acp_agent", "mcp"]}}},
    })  # fmt: skip
    spec = AgentSpec(input="go", agent="fake", tools=("demo.add", "demo.*"), isolation="host",
                     options={"workspace": str(workspace)})  # fmt: skip
    outcome, _ = _run(spec, config, ScriptedEngine.from_replies(["unused"]))
    assert outcome.ok, outcome.failure
    assert json.loads(outcome.answer) == [{
        "name": "demo", "command": sys.executable, "args": ["-c", "raise SystemExit(1)"],
        "env": [{"name": "LOG", "value": "warn"}],
    }]  # fmt: skip


def _mcp_add_script() -> ScriptedEngine:
    """Titles for calls without tools; the first turn calls the demo server's ``add``
    (opencode names it ``demo_add``); once its result is back, the answer quotes it."""

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if not tools:
            return reply("Adding")
        if messages[-1].role == "tool":
            return reply(f"The sum is {messages[-1].content.strip()[:200]}")
        names = [t.name for t in tools if t.name.startswith("demo") and t.name.endswith("add")]
        if not names:
            return reply(f"no demo tool among {sorted(t.name for t in tools)}")
        return reply("", (names[0], {"a": 20, "b": 22}))

    return ScriptedEngine(fallback=answer)


@pytest.mark.slow
def test_the_demo_server_reaches_opencode_through_acp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "JARVIS_AGENTS_DIR",
        os.environ.get("JARVIS_TEST_AGENTS_DIR") or os.path.expanduser("~/.cache/jarvis/agents"),
    )
    require(installed(BUILTIN["opencode"]), "needs `jarvis agents install opencode`")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    engine = _mcp_add_script()
    spec = AgentSpec(input="What is 20 + 22? Use the demo server.", agent="opencode",
                     tools=("demo.*",), isolation="host",
                     options={"workspace": str(workspace)}, max_wall=240)  # fmt: skip
    outcome, events = _run(spec, _config(), engine)
    assert outcome.ok, outcome.failure
    with_tools = [c for c in engine.calls if c.tools]
    offered = {t.name for t in with_tools[0].tools}
    assert "demo_add" in offered and "demo_pause" in offered  # the server's two tools
    # opencode called the server's tool, and its result came back to the model...
    assert any(m.role == "tool" and m.content.strip() == "42" for m in with_tools[-1].messages)
    assert outcome.answer == "The sum is 42"  # ...and reached the answer
    ended = [e for e in events if e.type.value == "tool_call_end"]
    assert any("42" in str(e.data["content"]) for e in ended)
    assert not demo_servers()  # stopped with the agent
