"""The first request the real opencode and codex send, launched as jarvis launches them
in a sandbox with no network (``Setup.offline``), read off the wire between the agent
and the run's gateway: no web tool, and codex says there is no network.

The agents run as host processes with the sandboxed launch (its config and HOME files
are what the container gets; tests/external/test_real_agents.py runs them in it): what
is checked is what the binary makes of the launch, which the gateway would partly hide
(it drops codex's hosted tools before the model)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http.client
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from jarvisd._messages import Generation, Message, ToolSpec
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.external import BUILTIN, installed
from jarvisd.external._host import host_gateway
from jarvisd.external._install import install_dir
from jarvisd.external._registry import GatewayAccess, Setup
from jarvisd.runs import AgentSpec
from tests.conftest import require

from .test_opencode_offline import launched_to_first_request
from .test_real_agents import _config, _ready, _run, real_agents_dir  # noqa: F401 - fixture

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("real_agents_dir")]


class _Recorder:
    """An HTTP hop between the agent and the gateway that keeps each request body."""

    def __init__(self, upstream: str) -> None:
        self.bodies: list[dict[str, Any]] = []
        target = urlsplit(upstream)
        bodies = self.bodies

        class Hop(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server calls it by this name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                bodies.append(json.loads(body))
                upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length")}  # fmt: skip
                try:
                    upstream.request("POST", self.path, body, headers)
                    answer = upstream.getresponse()
                    data = answer.read()  # the scripted answer is short: not streamed
                finally:
                    upstream.close()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(key, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Hop)

    @contextlib.contextmanager
    def running(self) -> Iterator[str]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{self.server.server_address[1]}"
        finally:
            self.server.shutdown()
            self.server.server_close()


def _first_request(name: str, tmp_path: Path) -> dict[str, Any]:
    """The body of the agent's first request that offers tools (opencode's very first
    one names the session and has none)."""
    agent = BUILTIN[name]
    require(installed(agent), f"needs `jarvis agents install {name}`")
    assert agent.prepare is not None
    prepare = agent.prepare
    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    first = asyncio.Event()

    def answer(messages: list[Message], tools: list[ToolSpec]) -> Generation:
        if tools:
            first.set()
        return reply("done")

    async def scenario() -> list[dict[str, Any]]:
        engine = ScriptedEngine(fallback=answer)
        async with host_gateway(engine, RunContext(), "scripted", max_tokens=64) as access:
            recorder = _Recorder(access.url)
            with recorder.running() as url:
                hop = dataclasses.replace(access, url=url)
                launch = prepare(_offline(install_dir(agent), home, hop))
                await launched_to_first_request(launch, home, workspace, first)
            return recorder.bodies

    bodies = asyncio.run(scenario())
    return next(b for b in bodies if b.get("tools"))


def _offline(install: Path, home: Path, access: GatewayAccess) -> Setup:
    """The launch of a sandboxed run without egress (jarvis runs as root in CI)."""
    return Setup(install, home, access, root=True, sandboxed=True, egress=False)


def _tool_names(body: dict[str, Any]) -> set[str]:
    return {t.get("function", t).get("name") or t["type"] for t in body["tools"]}


def test_opencode_offline_is_offered_no_web_tool(tmp_path: Path) -> None:
    names = _tool_names(_first_request("opencode", tmp_path))
    assert not names & {"webfetch", "websearch", "codesearch"}, names
    assert {"bash", "read", "edit", "grep"} <= names  # its coding tools stay


def test_codex_offline_is_told_there_is_no_network(tmp_path: Path) -> None:
    body = _first_request("codex", tmp_path)
    assert "web_search" not in _tool_names(body)
    text = json.dumps(body["input"])
    assert "Network access is enabled" not in text
    assert "no network access" in text
    assert "<skills_instructions>" not in text  # its bundled skills need the network
    assert "exec_command" in _tool_names(body)


def test_codex_in_a_sandbox_with_egress_keeps_its_own_text(workspace: Path) -> None:
    """Through a run (run_spec, the container, the run's egress proxy): a run that
    allows a host has network, so codex gets its own permissions text back. (Without
    egress, test_real_agents' sandboxed runs see the line saying there is none.)"""
    _ready("codex")
    engine = ScriptedEngine(fallback=lambda messages, tools: reply("done"))
    spec = AgentSpec(input="Say done.", agent="codex", allow_net=("pypi.test",),
                     options={"workspace": str(workspace)}, max_wall=240)  # fmt: skip
    outcome, _ = _run(spec, _config(workspace), engine)
    assert outcome.ok, outcome.failure
    assert outcome.metadata["sandboxed"] is True and "network" in outcome.metadata
    told = " ".join(str(m.content) for c in engine.calls if c.tools for m in c.messages)
    assert "Network access is enabled" in told and "no network access" not in told
