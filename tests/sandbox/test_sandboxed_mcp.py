"""MCP tools in sandboxed runs, with real parts: the real container engine (or
bubblewrap), a real MCP server (``tests/mcp/stdlib_server.py``: the sandbox image has
no ``mcp`` package) spoken to with the ``mcp`` package's ClientSession, mounted
read-only through the mount allowlist, and the agent in its own container.

The server runs in a container of its own, started by the host through the sandbox
backend; the agent inside its container calls it with ``tool`` frames. The hostile
tests swap the in-container runner for a program that sends what it likes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from jarvisd._config import Config, McpConfig, McpServerConfig
from jarvisd._messages import Generation, Message, ToolSpec
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import AgentSpec, RunOutcome, run_spec
from jarvisd.sandbox import connect
from jarvisd.sandbox._bwrap import bwrap_path
from tests.conftest import require

from .conftest import sandbox_config
from .test_escape import our_containers

SERVER = Path(__file__).resolve().parents[1] / "mcp" / "stdlib_server.py"


@pytest.fixture
def roots() -> Iterator[tuple[Path, Path]]:
    """Allowed roots (read-only, read-write) the sandbox user can reach: as root,
    bubblewrap runs as that user, and pytest's own tmp directories are private to root."""
    base = Path(tempfile.mkdtemp(prefix="jarvis-mcp-test-"))
    base.chmod(0o755)
    ro, rw = base / "ro", base / "rw"
    ro.mkdir(mode=0o755)
    rw.mkdir(mode=0o777)
    try:
        yield ro, rw
    finally:
        shutil.rmtree(base)


@pytest.fixture
def server_dir(roots: tuple[Path, Path]) -> Path:
    """The server's directory under the read-only allowed root, readable by the sandbox
    user; it is the server's one mount."""
    directory = roots[0] / "mcp"
    directory.mkdir()
    shutil.copy(SERVER, directory / "server.py")
    directory.chmod(0o755)
    (directory / "server.py").chmod(0o644)
    return directory


def mcp_config(
    roots: tuple[Path, Path], server_dir: Path, backend: str = "docker", **server: Any
) -> Config:
    table: dict[str, Any] = {
        "command": ("python3", str(server_dir / "server.py")),
        "mounts": (str(server_dir),),
        **server,
    }
    demo = McpServerConfig(**table)
    config = sandbox_config(roots, backend=backend)
    return dataclasses.replace(config, mcp=McpConfig(servers={"demo": demo}))


def server_containers() -> list[dict[str, Any]]:
    return [c for c in our_containers() if "server.py" in str(c.get("Command"))]


def sandboxed(*tools: str, question: str = "What is 2 + 40?", **spec: Any) -> AgentSpec:
    return AgentSpec(question, agent="orchestrator", tools=tools, isolation="sandbox", **spec)


async def until(condition: Any, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


# -- an honest run -------------------------------------------------------------------------


@pytest.mark.parametrize("backend", [pytest.param("docker", marks=pytest.mark.docker), "bwrap"])
def test_a_sandboxed_orchestrator_calls_a_server_tool_running_sandboxed(
    backend: str, roots: tuple[Path, Path], server_dir: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "docker":
        request.getfixturevalue("engine")
    else:
        require(
            bwrap_path() is not None, "bubblewrap is not installed (apt-get install bubblewrap)"
        )
    seen: list[Sequence[ToolSpec]] = []
    during: list[int] = []

    def call(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        seen.append(tools)
        return reply("", ("demo.add", {"a": 2, "b": 40}), ("demo.where", {}))

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if backend == "docker":  # the server's container, while the run goes on
            during.append(len(server_containers()))
        return reply("The sum is 42.")

    run = RunContext()
    spec = sandboxed("demo.add", "demo.where", "calculator")
    config = mcp_config(roots, server_dir, backend)
    outcome = asyncio.run(run_spec(spec, run, config, ScriptedEngine([call, answer])))
    assert outcome.failure is None, outcome.failure
    assert outcome.answer == "The sum is 42."
    assert outcome.metadata["sandbox"]["backend"] == backend
    offered = {t.name: t for t in seen[0]}
    assert set(offered) == {"demo.add", "demo.where", "calculator"}
    assert offered["demo.add"].parameters["required"] == ["a", "b"]  # the server's schema
    add, where = outcome.tool_results
    assert (add.tool_name, add.content, add.success) == ("demo.add", "42", True)
    # The server says where it runs: no network but loopback, the sandbox's host name.
    assert "net ['lo'] " in where.content and where.content.endswith("host sandbox")
    if os.getuid() == 0:
        assert " uid 0 " not in where.content
    assert run.budget.tool_calls == 2  # counted on the host's ledger
    if backend == "docker":
        assert during == [1]
        assert not our_containers()  # the server's container is gone with the run


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (("nope-mcp-server",), "cannot run nope-mcp-server: No such file or directory"),
        (("python3", "/srv/not-mounted/server.py"), "can't open file '/srv/not-mounted"),
    ],
)
@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_a_command_the_sandbox_lacks_fails_the_run_in_one_clear_line(
    command: tuple[str, ...], said: str, roots: tuple[Path, Path], server_dir: Path
) -> None:
    engine = ScriptedEngine([])
    config = mcp_config(roots, server_dir, command=command)
    outcome = asyncio.run(run_spec(sandboxed("demo.add"), RunContext(), config, engine))
    assert outcome.failure is not None and outcome.failure.code == "tool", outcome.failure
    assert outcome.exit_code == 1
    message = outcome.failure.message
    assert "\n" not in message and message.startswith("MCP server 'demo' failed to start")
    assert said in message
    assert (
        "It runs in the sandbox (docker), where its command must exist: in the sandbox " in message
    )
    assert "image, or in a directory given in mcp.servers.demo.mounts (within " in message
    assert engine.calls == [] and not our_containers()


# -- the server fails or the run stops mid-call --------------------------------------------


def _pause_run(roots: tuple[Path, Path], server_dir: Path, action: Any) -> tuple[float, RunOutcome]:
    """A run whose model calls demo.pause (60 s); once the call is in the server's
    hands, ``action(run)``; how long the run took from then, and its outcome."""
    engine = ScriptedEngine([reply("", ("demo.pause", {"seconds": 60})), reply("it failed")])
    run = RunContext()
    config = mcp_config(roots, server_dir, timeout=120)

    async def scenario() -> tuple[float, RunOutcome]:
        task = asyncio.ensure_future(
            run_spec(sandboxed("demo.pause", question="Pause for 60 s."), run, config, engine)
        )
        await until(lambda: engine.calls and server_containers())
        await asyncio.sleep(2.0)  # the tool frame reaches the host, the call the server
        assert not task.done()
        start = time.monotonic()
        await asyncio.to_thread(action, run)
        outcome = await task
        return time.monotonic() - start, outcome

    return asyncio.run(scenario())


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_killing_the_server_mid_call_is_a_clear_tool_error_not_a_hang(
    roots: tuple[Path, Path], server_dir: Path
) -> None:
    def kill_server(run: RunContext) -> None:
        (container,) = server_containers()
        client = connect(Config())
        try:
            client.api.kill(container["Id"])
        finally:
            client.close()

    took, outcome = _pause_run(roots, server_dir, kill_server)
    assert outcome.failure is None, outcome.failure
    (result,) = outcome.tool_results
    assert not result.success
    assert result.content.startswith(
        "Error: demo.pause failed: MCP server 'demo' exited during the call"
    ), result.content
    assert outcome.answer == "it failed" and took < 20
    assert not our_containers()


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_cancel_stops_the_call_and_removes_the_servers_container(
    roots: tuple[Path, Path], server_dir: Path
) -> None:
    took, outcome = _pause_run(roots, server_dir, lambda run: run.cancel.cancel("stop"))
    assert outcome.failure is not None and outcome.failure.code == "cancelled"
    assert took < 5
    assert not our_containers()  # the agent's container and the server's


# -- a hostile program in the agent's container ---------------------------------------------


# Sends the tool frames of ``CALLS`` one after another and reports what came back.
CALLS_THEN_REPORT = """
    import json
    from jarvisd.protocol import ToolFrame, ToolResultFrame
    offered = [t["name"] for t in start.payload["host_tools"]]
    replies = {}
    for i, (tool, arguments) in enumerate(CALLS):
        send(ToolFrame(id=f"c{i}", tool=tool, arguments=arguments))
        while True:
            frame = reader.read()
            if isinstance(frame, ToolResultFrame):
                replies[frame.id] = [frame.success, frame.content]
                break
    finish(json.dumps({"offered": offered, "replies": replies}))
"""


def hostile_run(
    install: Any, calls: list[tuple[str, dict[str, Any]]], config: Config, **spec: Any
) -> tuple[RunContext, RunOutcome]:
    install(f"CALLS = {calls!r}\n" + textwrap.dedent(CALLS_THEN_REPORT))
    run = RunContext()
    outcome = asyncio.run(run_spec(sandboxed("demo.add", **spec), run, config, ScriptedEngine([])))
    return run, outcome


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_a_tool_frame_for_a_tool_the_run_did_not_offer_is_refused(
    hostile: Any, roots: tuple[Path, Path], server_dir: Path
) -> None:
    # The run names demo.add only: the server has pause and where too, never offered.
    calls = [("demo.pause", {"seconds": 30}), ("calculator", {"expression": "1+1"}),
             ("demo.add", {"a": 1, "b": 2})]  # fmt: skip
    run, outcome = hostile_run(hostile, calls, mcp_config(roots, server_dir))
    assert outcome.failure is None, outcome.failure
    report = json.loads(outcome.answer)
    assert report["offered"] == ["demo.add"]
    refused = "was offered to this run (offered: demo.add)"
    assert report["replies"]["c0"][0] is False and refused in report["replies"]["c0"][1]
    assert report["replies"]["c1"][0] is False and refused in report["replies"]["c1"][1]
    assert report["replies"]["c2"] == [True, "3"]  # the offered tool works
    assert run.budget.tool_calls == 1  # the refused ones ran nothing


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_tool_arguments_that_are_not_an_object_end_the_run(
    hostile: Any, roots: tuple[Path, Path], server_dir: Path
) -> None:
    hostile("""
        import json
        from jarvisd.protocol import SENTINEL
        bad = {"kind": "tool", "id": "x", "tool": "demo.add", "arguments": [1, 2]}
        out.write((SENTINEL + json.dumps(bad) + "\\n").encode())
        out.flush()
        time.sleep(30)
    """)
    run = RunContext()
    config = mcp_config(roots, server_dir)
    outcome = asyncio.run(run_spec(sandboxed("demo.add"), run, config, ScriptedEngine([])))
    assert outcome.failure is not None and outcome.failure.code == "protocol"
    assert "tool.arguments must be an object" in outcome.failure.message
    assert run.budget.tool_calls == 0


@pytest.mark.docker
@pytest.mark.usefixtures("engine")
def test_the_tool_call_cap_holds_against_a_program_that_ignores_its_own(
    hostile: Any, roots: tuple[Path, Path], server_dir: Path
) -> None:
    calls = [("demo.add", {"a": i, "b": 1}) for i in range(5)]
    run, outcome = hostile_run(hostile, calls, mcp_config(roots, server_dir), max_tool_calls=2)
    assert outcome.failure is not None and outcome.failure.code == "budget", outcome
    assert "tool-call budget of 2 calls spent" in outcome.failure.message
    assert run.budget.tool_calls == 2
