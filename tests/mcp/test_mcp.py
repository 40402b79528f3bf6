"""MCP tool servers: a real stdio server (``demo_server.py``, written with the ``mcp``
package) serving two tools, reached through the config, the orchestrator and the CLI."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest

from jarvisd._config import Config, parse_config
from jarvisd._errors import ConfigError
from jarvisd._messages import Generation, Message, ToolCall, ToolSpec
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.mcp import McpError, McpToolset, acp_mcp_servers
from jarvisd.runs import AgentSpec, run_spec
from jarvisd.tools import ToolDispatcher

SERVER = str(Path(__file__).with_name("demo_server.py"))


def demo_config(**server: object) -> Config:
    table = {"command": [sys.executable, SERVER], **server}
    return parse_config({"mcp": {"servers": {"demo": table}}})


def demo_servers() -> list[psutil.Process]:
    """This process's live children running the demo server."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            # The server itself, not the reaper it runs under (whose argv holds its own).
            if child.cmdline()[1:2] == [SERVER] and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


# -- config --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"de mo": {"command": ["x"]}}, "mcp.servers.de mo: expected a name of 1 to 32"),
        ({"d.x": {"command": ["x"]}}, "mcp.servers.d.x: expected a name"),
        ({"d": {}}, "mcp.servers.d.command: expected a list: the program"),
        ({"d": {"command": [""]}}, "mcp.servers.d.command: expected a list: the program"),
        ({"d": {"command": "x"}}, "mcp.servers.d.command: expected a list of strings"),
        ({"d": {"command": ["x"], "env": {"A": 1}}}, "mcp.servers.d.env.A: expected a string"),
        ({"d": {"command": ["x"], "timeout": 0}}, "mcp.servers.d.timeout: expected a finite"),
        ({"d": {"command": ["x"], "args": []}}, "mcp.servers.d.args: expected one of command"),
        ({"d": ["x"]}, "mcp.servers.d: expected a table"),
    ],
)
def test_bad_server_declarations_are_refused_by_key(servers: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"mcp": {"servers": servers}})
    assert message in str(info.value)


def test_servers_become_acp_stdio_entries_with_absolute_commands() -> None:
    config = parse_config(
        {"mcp": {"servers": {"demo": {"command": ["python3", SERVER], "env": {"A": "b"}}}}}
    )
    (entry,) = acp_mcp_servers(config)
    assert os.path.isabs(entry.command) and entry.command.endswith("python3")
    assert entry.args == (SERVER,) and dict(entry.env) == {"A": "b"}
    with pytest.raises(Exception, match="no MCP server 'nope'"):
        acp_mcp_servers(config, ["nope"])
    missing = parse_config({"mcp": {"servers": {"m": {"command": ["no-such-program-xyz"]}}}})
    with pytest.raises(Exception, match="'no-such-program-xyz' is not on PATH"):
        acp_mcp_servers(missing)
    acp = pytest.importorskip("acp")  # the ACP client's package (external agents)
    wire = entry.to_acp()
    assert isinstance(wire, acp.schema.McpServerStdio)
    assert wire.env[0].name == "A" and wire.env[0].value == "b"


# -- the orchestrator on a scripted engine ---------------------------------------------


def test_the_orchestrator_calls_a_server_tool_and_the_server_stops_with_the_run() -> None:
    seen: list[Sequence[ToolSpec]] = []
    running: list[int] = []

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        running.append(len(demo_servers()))
        return reply("The sum is 42.")

    def call(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        seen.append(tools)
        running.append(len(demo_servers()))
        return reply("", ("demo.add", {"a": 2, "b": 40}))

    engine = ScriptedEngine([call, answer])
    spec = AgentSpec("What is 2 + 40?", agent="orchestrator", tools=("demo.*", "calculator"))
    outcome = asyncio.run(run_spec(spec, RunContext(), demo_config(), engine))
    assert outcome.failure is None, outcome.failure
    names = {t.name: t for t in seen[0]}
    assert set(names) == {"demo.add", "demo.pause", "calculator"}
    # The schema is the server's own.
    assert names["demo.add"].parameters["required"] == ["a", "b"]
    (result,) = outcome.tool_results
    assert result.tool_name == "demo.add" and result.success and result.content == "42"
    assert outcome.answer == "The sum is 42."
    assert running == [1, 1]  # one server, started once, for the whole run
    assert demo_servers() == []  # and stopped with it


def test_a_run_that_names_no_server_tool_starts_no_server() -> None:
    engine = ScriptedEngine([reply("hi")])
    spec = AgentSpec("hi", agent="orchestrator", tools=("calculator",))
    config = parse_config({"mcp": {"servers": {"demo": {"command": ["/nonexistent/x"]}}}})
    outcome = asyncio.run(run_spec(spec, RunContext(), config, engine))
    assert outcome.failure is None and outcome.answer == "hi"


def test_a_server_that_cannot_start_fails_the_run_with_its_stderr() -> None:
    code = "import sys; sys.stderr.write('no credentials for demo\\n'); sys.exit(3)"
    config = parse_config({"mcp": {"servers": {"demo": {"command": [sys.executable, "-c", code]}}}})
    spec = AgentSpec("q", agent="orchestrator", tools=("demo.add",))
    outcome = asyncio.run(run_spec(spec, RunContext(), config, ScriptedEngine([])))
    assert outcome.failure is not None and outcome.failure.code == "tool"
    assert "MCP server 'demo' failed to start" in outcome.failure.message
    assert "no credentials for demo" in outcome.failure.message


def test_a_sandboxed_run_never_starts_its_servers_as_host_processes() -> None:
    # No sandbox backend: the run is refused before any server starts (on the host, it
    # would run outside the sandbox). With one, see tests/sandbox/test_sandboxed_mcp.py.
    config = parse_config({"sandbox": {"backend": "none"},
                           "mcp": {"servers": {"demo": {"command": [sys.executable, SERVER]}}}})  # fmt: skip
    spec = AgentSpec("q", agent="orchestrator", tools=("demo.add",), isolation="sandbox")
    outcome = asyncio.run(run_spec(spec, RunContext(), config, ScriptedEngine([])))
    assert outcome.failure is not None and outcome.failure.code == "usage"
    assert 'running an agent sandboxed needs sandbox.backend = "docker"' in outcome.failure.message
    assert demo_servers() == []


# -- a server that dies or hangs mid-call ------------------------------------------------


async def _call_while(config: Config, action: str) -> tuple[str, bool, list[psutil.Process]]:
    async with McpToolset(config) as toolset:
        executor = ToolDispatcher(await toolset.tools(["demo.*"]))
        call = asyncio.ensure_future(
            executor.execute(ToolCall.from_arguments("demo.pause", {"seconds": 60}))
        )
        (server,) = demo_servers()
        await asyncio.sleep(1.0)  # the call is in the server's hands by now
        assert not call.done()
        if action == "kill":
            os.killpg(server.pid, signal.SIGKILL)
        result = await call
        left = demo_servers()
    return result.content, result.success, left


def test_killing_the_server_mid_call_is_a_clear_tool_error_not_a_hang() -> None:
    content, success, left = asyncio.run(_call_while(demo_config(timeout=120), "kill"))
    assert not success
    assert content.startswith("Error: demo.pause failed: MCP server 'demo' exited during the call")
    assert left == []


def test_a_hanging_server_times_out_and_is_stopped() -> None:
    content, success, left = asyncio.run(_call_while(demo_config(timeout=3), "wait"))
    assert not success
    assert "MCP server 'demo' did not answer pause within 3 s; the server was stopped" in content
    assert left == []


def test_a_call_to_a_dead_server_fails_at_once() -> None:
    async def go() -> str:
        async with McpToolset(demo_config()) as toolset:
            (tool,) = await toolset.tools(["demo.add"])
            (server,) = demo_servers()
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
            with pytest.raises(McpError) as info:
                for _ in range(100):  # the reader sees the end of output within a few ticks
                    await tool.execute(a=1, b=2)  # type: ignore[misc]
                    await asyncio.sleep(0.05)
            return str(info.value)

    assert "MCP server 'demo'" in asyncio.run(go())


# -- the CLI -------------------------------------------------------------------------------


def _jarvis(*args: str) -> subprocess.CompletedProcess[str]:
    config = Path(os.environ["JARVIS_CONFIG_DIR"]) / "config.toml"
    config.write_text(f'[mcp.servers.demo]\ncommand = ["{sys.executable}", "{SERVER}"]\n')
    return subprocess.run(
        [sys.executable, "-m", "jarvisd", *args], capture_output=True, text=True, timeout=120
    )


def test_jarvis_tools_lists_and_runs_server_tools() -> None:
    listed = _jarvis("tools", "list")
    assert listed.returncode == 0, listed.stderr
    assert "demo.add     Add two integers and return their sum." in listed.stdout
    assert "demo.pause" in listed.stdout and "calculator" in listed.stdout
    ran = _jarvis("tools", "run", "demo.add", '{"a": 2, "b": 40}')
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "42"
    wrong = _jarvis("tools", "run", "demo.nope", "{}")
    assert wrong.returncode == 2
    assert wrong.stderr.strip().splitlines() == [
        "jarvis: error: MCP server 'demo' has no tool 'nope' (it has: add, pause)"
    ]


def test_a_server_flooding_its_stdout_costs_bounded_memory() -> None:
    from jarvisd.executors._base import MAX_NOISE_LINES

    flood = "import sys\nfor i in range(20000): print('log line', i)\nsys.exit(1)\n"
    config = parse_config(
        {"mcp": {"servers": {"demo": {"command": [sys.executable, "-c", flood]}}}}
    )

    async def go() -> tuple[str, int]:
        async with McpToolset(config) as toolset:
            with pytest.raises(McpError) as info:
                await toolset.tools(["demo.*"])
            return str(info.value), len(toolset.servers["demo"]._noise)

    message, kept = asyncio.run(go())
    assert "MCP server 'demo' failed to start" in message and "log line 19999" in message
    assert kept <= MAX_NOISE_LINES


def test_tools_a_model_could_not_call_back_are_skipped() -> None:
    odd = str(Path(__file__).with_name("odd_server.py"))
    config = parse_config({"mcp": {"servers": {"odd": {"command": [sys.executable, odd]}}}})

    async def go() -> list[ToolSpec]:
        async with McpToolset(config) as toolset:
            tools = await toolset.tools(["odd.*"])
            ToolDispatcher(tools)  # two tools of one name would be refused here
            return [tool.spec for tool in tools]

    (spec,) = asyncio.run(go())
    assert spec.name == "odd.ok" and len(spec.description) == 2000


def test_jarvis_tools_list_names_a_broken_server_and_lists_the_rest() -> None:
    config = Path(os.environ["JARVIS_CONFIG_DIR"]) / "config.toml"
    config.write_text('[mcp.servers.broken]\ncommand = ["/nonexistent/mcp-server"]\n')
    out = subprocess.run(
        [sys.executable, "-m", "jarvisd", "tools", "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "calculator" in out.stdout
    assert out.stderr.strip().splitlines() == [
        "warning: MCP server 'broken' failed to start: cannot start "
        "/nonexistent/mcp-server: No such file or directory"
    ]
