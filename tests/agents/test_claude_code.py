"""claude_code: the real Claude Agent SDK (npm, pinned) driven by node_bridge, on a
scripted engine through the inference gateway's Anthropic Messages dialect, offline.

The SDK is the one ``packaging/dev/setup.sh --test`` installs (``jarvis agents install
claude_code``) under the real cache dir; these tests see it through a symlink.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from jarvisd._config import Config, parse_config
from jarvisd._events import EventType
from jarvisd._messages import Generation, Message, Role, ToolSpec
from jarvisd._paths import paths
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.external._claude_code import ClaudeCodeAgent, key_mode
from jarvisd.external._claude_code_install import NodeUnavailable, find_node
from jarvisd.runs import AgentSpec, RunOutcome, run_spec
from tests.conftest import require

# Captured before the autouse fixture points the cache at a temporary directory.
REAL_AGENTS = paths().cache / "agents"


def use_real_sdk() -> None:
    require(shutil.which("node") is not None, "Node.js is not installed")
    require(
        (REAL_AGENTS / "claude_code" / ".jarvis-lock-sha256").is_file(),
        f"the Claude Agent SDK is not installed in {REAL_AGENTS} (jarvis agents install claude_code)",
    )
    target = paths().cache / "agents"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(REAL_AGENTS, target_is_directory=True)


def model(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
    """Reads note.txt with Claude Code's Read tool, then answers from what it read; asked
    to remember, says whether the earlier answer is in the (resumed) conversation."""
    last = str(messages[-1].content)
    if "remember" in last:
        seen = any("The note says: hello world." in str(m.content) for m in messages)
        return reply(f"resumed={seen}")
    if any(m.role is Role.TOOL for m in messages):
        return reply("The note says: hello world.")
    names = {t.name for t in tools}
    assert "Read" in names, names  # Claude Code's own tools, offered through the gateway
    return reply("", ("Read", {"file_path": _NOTE[0]}))


_NOTE: list[str] = []


def ask(
    workspace: Path, text: str, engine: ScriptedEngine, config: Config | None = None,
    **options: str,
) -> tuple[RunOutcome, list[tuple[EventType, dict[str, object]]]]:  # fmt: skip
    """A run on the host (``--no-sandbox``) unless ``config`` (the sandbox's) is given."""
    run = RunContext()
    events: list[tuple[EventType, dict[str, object]]] = []
    run.bus.subscribe(lambda e: events.append((e.type, dict(e.data))))
    spec = AgentSpec(text, agent="claude_code", options={"workspace": str(workspace), **options},
                     isolation="host" if config is None else "default")  # fmt: skip
    return asyncio.run(run_spec(spec, run, config or Config(), engine)), events


def sandbox_config(workspace: Path) -> Config:
    from tests.external.test_sandboxed import IMAGE, _docker_ok

    require(_docker_ok(), "needs a container engine (DOCKER_HOST)")
    os.chmod(workspace, 0o777)  # the sandbox user works in it
    return parse_config({"sandbox": {"image": IMAGE, "allowed_roots": [f"{workspace}:rw"]}})


@pytest.mark.parametrize("where", ["host", "sandbox"])
def test_claude_code_calls_a_tool_answers_and_resumes_its_session(
    tmp_path: Path, where: str
) -> None:
    from tests.external.test_sandboxed import _containers

    use_real_sdk()
    config = sandbox_config(tmp_path) if where == "sandbox" else None
    before = set(_containers()) if config else set()
    note = tmp_path / "note.txt"
    note.write_text("hello world\n")
    os.chmod(note, 0o644)
    _NOTE[:] = [str(note)]
    running: list[set[str]] = []  # the containers while the model is asked

    def watched(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        running.append(set(_containers()) - before if config else set())
        return model(messages, tools)

    engine = ScriptedEngine(fallback=watched)
    first, events = ask(tmp_path, "What does note.txt say?", engine, config)
    assert first.failure is None, first.failure
    assert first.answer == "The note says: hello world."
    (read,) = first.tool_results
    assert read.tool_name == "Read" and read.success and "hello world" in read.content
    starts = [d for t, d in events if t is EventType.TOOL_CALL_START]
    assert starts and starts[0]["tool"] == "Read"
    assert starts[0]["arguments"] == {"file_path": str(note)}
    session = first.metadata["session_id"]
    assert isinstance(session, str) and session
    second, _ = ask(tmp_path, "Do you remember what it said?", engine, config, resume=session)
    assert second.failure is None, second.failure
    assert second.answer == "resumed=True"
    assert second.metadata["session_id"] == session
    assert first.metadata["sandboxed"] is second.metadata["sandboxed"] is (config is not None)
    # Sessions live in jarvis's own data dir (one home per mode), never in ~/.claude.
    home = "claude_code-sandbox" if config else "claude_code"
    assert (paths().data / "agents" / home / ".claude").is_dir()
    if config is not None:
        assert all(len(now) == 1 for now in running), running  # the bridge's container
        assert set(_containers()) <= before  # each run's container is gone
        assert not list((paths().data / "agents" / home).glob("gateway-*.sock"))


@pytest.mark.parametrize("where", ["host", "sandbox"])
def test_claude_code_calls_the_runs_calculator_through_the_gateway(
    tmp_path: Path, where: str
) -> None:
    """The run's tools reach the SDK as one HTTP MCP server (the gateway's ``/mcp``):
    the model is offered ``mcp__jarvis__calculator``, and its call runs on the host, on
    the run's ledger, published once by the host's executor."""
    use_real_sdk()
    config = sandbox_config(tmp_path) if where == "sandbox" else None
    offered: list[set[str]] = []

    def calculating(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        offered.append({t.name for t in tools})
        results = [str(m.content) for m in messages if m.role is Role.TOOL]
        if results:
            return reply("The answer is " + results[-1])
        return reply("", ("mcp__jarvis__calculator", {"expression": "6*7"}))

    run = RunContext()
    events: list[tuple[EventType, dict[str, object]]] = []
    run.bus.subscribe(lambda e: events.append((e.type, dict(e.data))))
    spec = AgentSpec("What is 6*7?", agent="claude_code", tools=("calculator",),
                     options={"workspace": str(tmp_path)}, isolation="host" if config is None else "default")  # fmt: skip
    engine = ScriptedEngine(fallback=calculating)
    outcome = asyncio.run(run_spec(spec, run, config or Config(), engine))
    assert outcome.failure is None, outcome.failure
    assert "mcp__jarvis__calculator" in offered[0] and "Read" in offered[0]
    assert outcome.answer == "The answer is 42"
    (used,) = outcome.tool_results
    assert used.tool_name == "mcp__jarvis__calculator" and used.success
    calls = [(t, d["tool"]) for t, d in events if t in (EventType.TOOL_CALL_START,
                                                        EventType.TOOL_CALL_END)]  # fmt: skip
    assert calls == [(EventType.TOOL_CALL_START, "calculator"),
                     (EventType.TOOL_CALL_END, "calculator")]  # fmt: skip
    assert run.budget.tool_calls == 1


def test_a_real_key_in_the_sandbox_stays_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """``[claude_code] api_key_env`` in a sandboxed run: no longer refused, and never
    handed in: the gateway holds it as a credential for Anthropic's API (the whole
    path, on a stand-in vendor, is in test_claude_code_credentials)."""
    from jarvisd.engines import CredentialEngine

    monkeypatch.setenv("MY_CLAUDE_KEY", "sk-ant-named")
    config = parse_config({"claude_code": {"api_key_env": "MY_CLAUDE_KEY"}})
    engine = ClaudeCodeAgent(ScriptedEngine([]), "claude-x", config=config)._anthropic_credential()
    assert isinstance(engine, CredentialEngine)
    assert engine.credential.env == "MY_CLAUDE_KEY"
    assert engine.credential.upstream == "https://api.anthropic.com"
    assert engine.default_model() == "claude-x"


_OFFLINE = r"""
import asyncio, json, os, sys
from pathlib import Path
from jarvisd._config import Config
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import AgentSpec, run_spec

from jarvisd.bridge import FrameSession

sdk_env = {}
serve = FrameSession.run


async def spy(self, start):  # what the bridge is told to give the SDK
    sdk_env.update(start.payload.get("env", {}))
    return await serve(self, start)


FrameSession.run = spy
engine = ScriptedEngine([reply("Offline and local.")], fallback=lambda m, t: reply("Offline and local."))
spec = AgentSpec("Say where you run.", agent="claude_code", options={"workspace": sys.argv[1]},
                 isolation="host")
outcome = asyncio.run(run_spec(spec, RunContext(), Config(), engine))
print(json.dumps({"outcome": outcome.to_dict(), "calls": len(engine.calls), "env": sdk_env}))
"""


def test_no_paid_api_is_reached_and_no_key_comes_from_the_environment(tmp_path: Path) -> None:
    """In a network namespace with only loopback (any other address is refused), with a
    real-looking key and an Anthropic base URL in the environment: the run still answers,
    from the scripted engine, through the gateway, which accepts only its own token (the
    environment's key would be refused there)."""
    use_real_sdk()
    require(shutil.which("unshare") is not None and os.geteuid() == 0, "needs root and unshare")
    env = {
        **os.environ,
        "ANTHROPIC_API_KEY": "sk-ant-api03-from-the-environment",
        "ANTHROPIC_AUTH_TOKEN": "from-the-environment",
        "ANTHROPIC_BASE_URL": "https://api.anthropic.com",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    program = tmp_path / "offline.py"
    program.write_text(_OFFLINE)
    script = "ip link set lo up && exec " + shlex.join(
        [sys.executable, str(program), str(tmp_path)]
    )
    out = subprocess.run(
        ["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=240
    )
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["outcome"]["failure"] is None, data["outcome"]["failure"]
    assert data["outcome"]["answer"] == "Offline and local."
    assert data["calls"] >= 1
    sdk_env = data["env"]
    assert not any("from-the-environment" in value for value in sdk_env.values()), sdk_env
    assert sdk_env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    assert set(sdk_env) <= {
        "PATH", "HOME", "IS_SANDBOX", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER",
        "DISABLE_ERROR_REPORTING",
    }  # fmt: skip


def test_a_real_key_only_when_the_config_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    engine = ScriptedEngine([])
    local = ClaudeCodeAgent(engine, config=Config())
    assert local._api_key() is None
    assert "local model" in key_mode(Config())
    named = parse_config({"claude_code": {"api_key_env": "MY_CLAUDE_KEY"}})
    assert "$MY_CLAUDE_KEY" in key_mode(named)
    held = parse_config({"credentials": {"cloud": {
        "env": "K", "upstream": "https://api.anthropic.com", "agents": ["claude_code"]}}})  # fmt: skip
    assert "credential 'cloud'" in key_mode(held) and "held on the host" in key_mode(held)
    with pytest.raises(Exception, match=r"names \$MY_CLAUDE_KEY, which is not set"):
        ClaudeCodeAgent(engine, config=named)._api_key()
    monkeypatch.setenv("MY_CLAUDE_KEY", "sk-ant-named")
    assert ClaudeCodeAgent(engine, config=named)._api_key() == "sk-ant-named"


def test_jarvis_agents_list_says_which_model_claude_code_uses() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "jarvisd", "agents", "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "model: the run's local model, through the inference gateway" in out.stdout


def test_an_old_node_is_refused_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "node"
    fake.write_text("#!/bin/sh\necho v16.20.0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(
        NodeUnavailable, match=r"needs Node.js >= 18.14, .* is v16.20.0: install Node.js 20"
    ):
        find_node()
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    with pytest.raises(NodeUnavailable, match="none is on PATH"):
        find_node()
    assert NodeUnavailable.exit_code == 3


def test_the_options_reach_the_bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the bridge is told (the Start frame), without Node: the workspace, allowed
    tools, permission mode, turns, system prompt and session to resume."""
    from jarvisd.bridge import FrameSession, Outcome
    from jarvisd.executors import ExecResult
    from jarvisd.external import _claude_code_install
    from jarvisd.protocol import ResultFrame, Start

    seen: list[Start] = []

    async def serve(self: FrameSession, start: Start) -> Outcome:
        seen.append(start)
        await self.channel.kill("closed")
        await self.channel.wait()
        result = {"answer": "ok", "session_id": "s-2", "subtype": "success", "turns": 1}
        return Outcome(ResultFrame(result=result), ExecResult(0))

    monkeypatch.setattr(FrameSession, "run", serve)
    monkeypatch.setattr(_claude_code_install, "find_node", lambda: "/bin/true")
    monkeypatch.setattr(_claude_code_install, "ensure_sdk", lambda: tmp_path)
    spec = AgentSpec(
        "q", agent="claude_code", system_prompt="Be brief.",
        options={"workspace": str(tmp_path), "allowed_tools": "Read, Grep",
                 "permission_mode": "plan", "turns": "3", "resume": "s-1"},
        isolation="host",
    )  # fmt: skip
    outcome = asyncio.run(run_spec(spec, RunContext(), Config(), ScriptedEngine([])))
    assert outcome.failure is None and outcome.answer == "ok"
    assert outcome.metadata["session_id"] == "s-2"
    payload = seen[0].payload
    assert seen[0].task == "claude_code"
    assert payload["cwd"] == str(tmp_path) and payload["prompt"] == "q"
    assert payload["allowed_tools"] == ["Read", "Grep"] and payload["permission_mode"] == "plan"
    assert payload["max_turns"] == 3 and payload["system_prompt"] == "Be brief."
    assert payload["resume"] == "s-1"
