"""A host program's detached grandchild (``setsid``, holding the program's stdout)
neither keeps a run waiting past its wall limit nor outlives the run (issue 29,
"--no-sandbox and --max-wall"): through the CLI with an external agent on the host,
and through a host MCP server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from jarvisd._config import parse_config
from jarvisd.mcp import McpError, McpToolset
from jarvisd.testing import acp_agent


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_an_agents_detached_grandchild_holding_stdout_ends_with_the_wall_limit(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = Path(os.environ["JARVIS_CONFIG_DIR"]) / "config.toml"
    pid_file = tmp_path / "detached.pid"
    script = str(Path(acp_agent.__file__))  # this tree's (the agent's env is from nothing)
    agent = json.dumps([sys.executable, script, "detach", str(pid_file)])
    config.write_text(f"[agents.external.detach]\ncommand = {agent}\n")
    argv = [sys.executable, "-m", "jarvisd", "ask", "--no-daemon", "--agent", "detach",
            "--no-sandbox", "--max-wall", "6", "--option", f"workspace={workspace}", "go"]  # fmt: skip
    # The grandchild sleeps 120 s: a run that waited for it would outlast this timeout.
    grandchild, gone = 0, False
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        grandchild = int(pid_file.read_text()) if pid_file.exists() else 0
        gone = bool(grandchild) and wait_gone(grandchild)
    finally:
        if not grandchild and pid_file.exists():
            grandchild = int(pid_file.read_text())
        if grandchild and alive(grandchild):
            os.kill(grandchild, 9)  # not to leave it behind when the test fails
    assert grandchild, done.stderr
    assert done.returncode == 1, done.stderr
    assert "wall-clock budget of 6 s spent" in done.stderr + done.stdout
    assert gone, "the detached grandchild outlived the run"


SERVER = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                         start_new_session=True)
open(sys.argv[1], "w").write(str(child.pid))
sys.exit("this server gives up at once")  # its grandchild keeps its stdout open
"""


def test_a_host_mcp_servers_detached_grandchild_goes_with_the_run(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    config = parse_config({"mcp": {"servers": {"odd": {
        "command": [sys.executable, "-c", SERVER, str(pid_file)]}}}})  # fmt: skip

    async def go() -> None:
        async with McpToolset(config) as toolset:
            with contextlib.suppress(McpError):  # the server is gone
                await toolset.tools(["odd.*"])

    grandchild, gone = 0, False
    try:
        asyncio.run(asyncio.wait_for(go(), 60))
        grandchild = int(pid_file.read_text()) if pid_file.exists() else 0
        gone = bool(grandchild) and wait_gone(grandchild)
    finally:
        if not grandchild and pid_file.exists():
            grandchild = int(pid_file.read_text())
        if grandchild and alive(grandchild):
            os.kill(grandchild, 9)
    assert grandchild
    assert gone, "the server's detached grandchild outlived the run"
