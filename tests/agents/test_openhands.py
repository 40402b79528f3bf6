"""openhands: the OpenHands SDK in its own Python 3.12 venv, over frames, on the run's
engine through the inference gateway, editing a workspace.

The venv is the one ``packaging/dev/setup.sh --test`` installs (``jarvis agents install
openhands``) under the real cache dir; these tests see it through a symlink.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from jarvisd._config import Config
from jarvisd._events import EventType
from jarvisd._messages import Generation, Message, ToolSpec
from jarvisd._paths import paths
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.external._openhands_venv import NoPython312, find_python312, venv_dir
from jarvisd.runs import AgentSpec, run_spec
from tests.conftest import require

# Captured before the autouse fixture points the cache at a temporary directory.
REAL_VENVS = paths().cache / "venvs"


def use_real_venv() -> None:
    require(
        (REAL_VENVS / "openhands" / ".jarvis-pins").is_file(),
        f"the openhands venv is not installed in {REAL_VENVS} (jarvis agents install openhands)",
    )
    target = paths().cache / "venvs"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(REAL_VENVS, target_is_directory=True)


def sandbox_config(workspace: Path, memory: str = "512m") -> Config:
    """The sandbox (the default for openhands) with ``workspace`` allowed read-write."""
    import os

    from jarvisd._config import parse_config
    from tests.external.test_sandboxed import IMAGE, _docker_ok

    require(_docker_ok(), "needs a container engine (DOCKER_HOST)")
    os.chmod(workspace, 0o777)  # the sandbox user works in it
    return parse_config({
        "sandbox": {"image": IMAGE, "allowed_roots": [f"{workspace}:rw"], "memory": memory},
    })  # fmt: skip


@pytest.mark.parametrize("where", ["host", pytest.param("sandbox", marks=pytest.mark.docker)])
def test_a_scripted_openhands_run_edits_one_file_in_the_workspace(
    tmp_path: Path, where: str
) -> None:
    from tests.external.test_sandboxed import _containers

    use_real_venv()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = sandbox_config(workspace) if where == "sandbox" else Config()
    before = set(_containers()) if where == "sandbox" else set()
    running: list[set[str]] = []  # the containers while the model is asked
    target = workspace / "hello.py"

    replies = [
        reply("", ("file_editor", {"command": "create", "path": str(target),
                                   "file_text": "print('hello')\n"})),
        reply("", ("finish", {"message": "Created hello.py."})),
    ]  # fmt: skip

    def scripted(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        running.append(set(_containers()) - before if where == "sandbox" else set())
        return replies.pop(0)

    engine = ScriptedEngine(fallback=scripted)
    events: list[tuple[EventType, dict[str, object]]] = []
    run = RunContext()
    run.bus.subscribe(lambda e: events.append((e.type, dict(e.data))))
    spec = AgentSpec(
        "Create hello.py printing hello.",
        agent="openhands",
        options={"workspace": str(workspace)},
        isolation="host" if where == "host" else "default",
    )
    outcome = asyncio.run(run_spec(spec, run, config, engine))
    assert outcome.failure is None, outcome.failure
    assert outcome.metadata["sandboxed"] is (where == "sandbox")
    if where == "sandbox":
        assert all(len(now) == 1 for now in running), running  # the runner's container
        assert set(_containers()) <= before
    assert target.read_text() == "print('hello')\n"
    assert outcome.answer == "Created hello.py."
    tools = [r.tool_name for r in outcome.tool_results]
    assert tools[0] == "file_editor" and outcome.tool_results[0].success
    # The SDK's calls went through the run's engine: two generations, on its ledger.
    assert len(engine.calls) == 2 and run.budget.calls == 2
    starts = [d for t, d in events if t is EventType.TOOL_CALL_START]
    assert starts and starts[0]["tool"] == "file_editor"


def tool_model(call: tuple[str, dict[str, object]], offered: list[list[str]]) -> ScriptedEngine:
    """A model that makes ``call`` once, then finishes with the tool's answer."""
    from jarvisd._messages import Role

    def model(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        offered.append([t.name for t in tools])
        results = [str(m.content) for m in messages if m.role is Role.TOOL]
        if results:
            return reply("", ("finish", {"message": "The answer is " + results[-1]}))
        return reply("", call)

    return ScriptedEngine(fallback=model)


def tool_events(run: RunContext, tool: str) -> list[tuple[EventType, dict[str, object]]]:
    """The run's TOOL_CALL_START and END events for ``tool``, as they come."""
    kinds = (EventType.TOOL_CALL_START, EventType.TOOL_CALL_END)
    events: list[tuple[EventType, dict[str, object]]] = []
    run.bus.subscribe(
        lambda e: events.append((e.type, dict(e.data)))
        if e.type in kinds and e.data.get("tool") == tool else None
    )  # fmt: skip
    return events


@pytest.mark.parametrize("where", ["host", pytest.param("sandbox", marks=pytest.mark.docker)])
def test_openhands_calls_the_runs_calculator_through_the_gateway(
    tmp_path: Path, where: str
) -> None:
    """A built-in tool of jarvis's, offered over the gateway's MCP endpoint: the SDK
    shows it to the model by its own name, and the call runs on the run's ledger."""
    use_real_venv()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = sandbox_config(workspace) if where == "sandbox" else Config()
    offered: list[list[str]] = []
    engine = tool_model(("calculator", {"expression": "6*7"}), offered)
    run = RunContext()
    events = tool_events(run, "calculator")
    spec = AgentSpec(
        "What is 6*7?", agent="openhands", tools=("calculator",),
        options={"workspace": str(workspace)}, isolation="host" if where == "host" else "default",
    )  # fmt: skip
    outcome = asyncio.run(run_spec(spec, run, config, engine))
    assert outcome.failure is None, outcome.failure
    assert outcome.metadata["sandboxed"] is (where == "sandbox")
    assert "calculator" in offered[0] and "file_editor" in offered[0]
    assert outcome.answer.endswith("42")
    assert outcome.tool_results[0].tool_name == "calculator"
    # Published once, by the host's executor (the runner leaves jarvis's tools to it).
    assert events == [
        (EventType.TOOL_CALL_START, {"tool": "calculator", "arguments": {"expression": "6*7"},
                                     "call_id": events[0][1]["call_id"]}),
        (EventType.TOOL_CALL_END, {"tool": "calculator", "call_id": events[0][1]["call_id"],
                                   "success": True, "latency_s": events[1][1]["latency_s"],
                                   "content": "42"}),
    ]  # fmt: skip
    assert run.budget.tool_calls == 1 and run.budget.calls == 2


def _stdlib_server_config(base: Path, workspace: Path) -> Config:
    """The demo MCP server as a sandbox can run it: the stdlib-only server (the image has
    no ``mcp`` package) in a read-only allowed directory, mounted into its container."""
    import shutil

    from jarvisd._config import McpConfig, McpServerConfig

    directory = base / "mcp"
    directory.mkdir(mode=0o755)
    shutil.copy(Path(__file__).resolve().parents[1] / "mcp" / "stdlib_server.py",
                directory / "server.py")  # fmt: skip
    (directory / "server.py").chmod(0o644)
    sandbox = dataclasses.replace(
        sandbox_config(workspace).sandbox,
        allowed_roots=(f"{workspace}:rw", str(directory)),
    )
    demo = McpServerConfig(command=("python3", str(directory / "server.py")),
                           mounts=(str(directory),))  # fmt: skip
    return Config(sandbox=sandbox, mcp=McpConfig(servers={"demo": demo}))


@pytest.mark.parametrize("where", ["host", pytest.param("sandbox", marks=pytest.mark.docker)])
def test_the_runs_mcp_servers_tools_reach_openhands_through_the_gateway(
    tmp_path: Path, where: str
) -> None:
    """The run starts the MCP server and openhands reaches its tool through the gateway
    under the name MCP clients accept (``demo.add`` -> ``demo_add``). With
    ``--no-sandbox`` the server is a host process; with openhands in its sandbox, the
    server runs in a container of its own too (a contained agent's tools are no way out
    of it), never as a host process."""
    import tempfile

    from tests.mcp.test_mcp import demo_config, demo_servers
    from tests.sandbox.test_escape import our_containers

    use_real_venv()
    base = Path(tempfile.mkdtemp(prefix="jarvis-oh-mcp-"))  # the sandbox user reads it
    base.chmod(0o755)
    workspace = base / "ws"
    workspace.mkdir()
    config = demo_config() if where == "host" else _stdlib_server_config(base, workspace)
    offered: list[list[str]] = []
    during: list[list[object]] = []  # the server's containers when the model is asked
    scripted = tool_model(("demo_add", {"a": 2, "b": 40}), offered)

    def model(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if where == "sandbox":
            during.append([c for c in our_containers() if "server.py" in str(c.get("Command"))])
        assert not demo_servers() if where == "sandbox" else True  # no host server process
        assert scripted.fallback is not None
        return scripted.fallback(messages, tools)

    engine = ScriptedEngine(fallback=model)
    run = RunContext()
    events = tool_events(run, "demo.add")
    spec = AgentSpec(
        "Add 2 and 40.", agent="openhands", tools=("demo.add",),
        options={"workspace": str(workspace)}, isolation="host" if where == "host" else "default",
    )  # fmt: skip
    try:
        outcome = asyncio.run(run_spec(spec, run, config, engine))
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)
    assert outcome.failure is None, outcome.failure
    assert "demo_add" in offered[0]
    add = outcome.tool_results[0]
    assert add.tool_name == "demo_add" and add.success and add.content.endswith("42")
    assert outcome.answer.endswith("42")
    assert [(t, d["tool"]) for t, d in events] == [
        (EventType.TOOL_CALL_START, "demo.add"), (EventType.TOOL_CALL_END, "demo.add")
    ]  # fmt: skip
    if where == "sandbox":
        assert during and all(len(found) == 1 for found in during), during
        assert not [c for c in our_containers() if "server.py" in str(c.get("Command"))]
    assert not demo_servers()  # stopped with the run


def test_no_python_312_is_said_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "JARVIS_PYTHON312", sys.executable if sys.version_info < (3, 12) else "/bin/false"
    )
    with pytest.raises(NoPython312, match=r"is not a Python >= 3\.12 interpreter"):
        find_python312()
    monkeypatch.delenv("JARVIS_PYTHON312")
    monkeypatch.setenv("PATH", "/nonexistent")
    if sys.version_info < (3, 12):
        with pytest.raises(NoPython312, match=r"pyenv install 3\.12.*JARVIS_PYTHON312"):
            find_python312()
    assert NoPython312.exit_code == 3
    assert venv_dir() == paths().cache / "venvs" / "openhands"


def test_openhands_without_a_workspace_is_a_usage_error() -> None:
    spec = AgentSpec("q", agent="openhands")
    outcome = asyncio.run(run_spec(spec, RunContext(), Config(), ScriptedEngine([])))
    assert outcome.failure is not None and outcome.failure.code == "usage"
    assert "--option workspace=DIR" in outcome.failure.message


_TIMEOUT_PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import httpx
from runners.openhands_runner import make_llm
from openhands.sdk import Message, TextContent

seen = []


class Sent(Exception):
    pass


def send(self, request, **kwargs):
    seen.append(request.extensions.get("timeout"))
    raise Sent()


httpx.Client.send = send  # what the SDK, litellm and openai would really send, caught
payload = json.loads(sys.argv[2])
try:
    make_llm(payload).completion([Message(role="user", content=[TextContent(text="hi")])])
except Exception:
    pass
print(json.dumps(seen))
"""


def test_a_model_request_may_take_as_long_as_the_runner(tmp_path: Path) -> None:
    """litellm gives a request 600 s when told nothing (``timeout=None``): on a busy
    CI machine OpenHands's first prompt took longer on Qwen2.5-Coder-1.5B and the run
    failed with litellm.Timeout. The request's HTTP limits are the runner's own."""
    import os
    import subprocess

    from jarvisd.external._openhands import _ENV, _RUNNER_TIMEOUT_S, _SOURCE

    use_real_venv()
    python = REAL_VENVS / "openhands" / "bin" / "python"
    program = tmp_path / "probe.py"
    program.write_text(_TIMEOUT_PROBE)
    payload = {"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key": "k",
               "request_timeout": int(_RUNNER_TIMEOUT_S)}  # fmt: skip
    done = subprocess.run(
        [str(python), str(program), _SOURCE, json.dumps(payload)],
        capture_output=True, text=True, timeout=120, env={**os.environ, **_ENV},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    sent = json.loads(done.stdout)
    assert sent and sent[0]["read"] == _RUNNER_TIMEOUT_S, sent


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.timeout(1500)  # OpenHands's prompt (~6,400 tokens): minutes to read on 2 cores
def test_openhands_on_a_real_model_works_through_the_gateway_and_reports_what_it_did() -> None:
    """Qwen2.5-Coder-1.5B: the SDK's requests reached the run's engine through the
    gateway, the run ended without an error, what the model asked for came back as
    OpenHands tool calls, and a file it wrote holds what it was asked to write. Not
    asserted: that it did write it. OpenHands' prompt holds the run's paths, so the
    model's first reply varies between runs even at temperature 0, and in one CI run of
    three 1.5B answered in prose without acting. The workspace has one fixed path, so
    that this varies less from run to run."""
    from jarvisd.engines import LlamaCppEngine
    from tests.conftest import real_model_path

    use_real_venv()
    # One fixed path: the SDK's prompt holds it, so each run asks the model the same.
    workspace = Path(tempfile.gettempdir()) / "jarvis-openhands-real" / "ws"
    shutil.rmtree(workspace.parent, ignore_errors=True)
    workspace.mkdir(parents=True)
    config = sandbox_config(workspace, memory="2g")
    engine = LlamaCppEngine(str(real_model_path("qwen2.5-coder-1.5b")), n_ctx=16384)
    run = RunContext()
    spec = AgentSpec(
        "Create a file named greeting.txt containing the word hello.",
        agent="openhands",
        options={"workspace": str(workspace)},
        temperature=0,
        max_tokens=256,
        max_turns=3,
    )

    async def go() -> object:
        try:
            return await run_spec(spec, run, config, engine)
        finally:
            await engine.aclose()

    outcome = asyncio.run(go())
    assert run.budget.calls >= 1 and run.budget.used.prompt_tokens > 1000  # the SDK's prompt
    failure = outcome.failure  # type: ignore[attr-defined]
    assert failure is None, failure  # a run that ends in no_answer did not do the task
    for result in outcome.tool_results:  # type: ignore[attr-defined]
        assert result.tool_name in {"file_editor", "terminal", "finish", "think", "task_tracker"}
    greeting = workspace / "greeting.txt"
    called = [r.tool_name for r in outcome.tool_results]  # type: ignore[attr-defined]
    if greeting.is_file():  # what the user asked for, with the word in it, by a tool
        assert "hello" in greeting.read_text().lower(), greeting.read_text()
        assert "file_editor" in called or "terminal" in called, called


_OFFLINE = r"""
import asyncio, json, sys
from pathlib import Path
from jarvisd._config import Config
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import AgentSpec, run_spec

target = Path(sys.argv[1]) / "out.txt"
engine = ScriptedEngine([
    reply("", ("file_editor", {"command": "create", "path": str(target), "file_text": "offline\n"})),
    reply("", ("finish", {"message": "Done offline."})),
])
spec = AgentSpec("Write out.txt.", agent="openhands", options={"workspace": sys.argv[1]},
                 isolation="host")
outcome = asyncio.run(run_spec(spec, RunContext(), Config(), engine))
print(json.dumps({"outcome": outcome.to_dict(), "file": target.read_text()}))
"""


def test_openhands_needs_no_network_but_the_gateway(tmp_path: Path) -> None:
    """In a network namespace with only loopback, the SDK (litellm included) still runs
    its loop: nothing it needs lies beyond the run's gateway."""
    import os
    import shlex
    import shutil
    import subprocess

    use_real_venv()
    require(shutil.which("unshare") is not None and os.geteuid() == 0, "needs root and unshare")
    program = tmp_path / "offline.py"
    program.write_text(_OFFLINE)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = "ip link set lo up && exec " + shlex.join(
        [sys.executable, str(program), str(workspace)]
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        ["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=280
    )
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["outcome"]["failure"] is None, data["outcome"]["failure"]
    assert data["outcome"]["answer"] == "Done offline." and data["file"] == "offline\n"
