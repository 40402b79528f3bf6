"""opencode started the way jarvis starts it on the host (``--no-sandbox``: its launch,
its HOME written by ``write_home``, ``start_on_host``, the run's gateway on loopback)
asks no package registry for anything before its first inference request.

At its start opencode npm-installs ``@opencode-ai/plugin`` into its config dir: on the
host a trip to registry.npmjs.org (seconds before its first request, and traffic a
local run should not make); in the sandbox a failed attempt. The agent's HOME here
carries an ``.npmrc`` (which opencode's installer reads) naming a registry on loopback
that records what it is asked; the launch's marker files must leave it unasked."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jarvisd._messages import Generation
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.external import BUILTIN, installed
from jarvisd.external._host import host_gateway, start_on_host
from jarvisd.external._install import install_dir
from jarvisd.external._registry import Launch, Setup
from jarvisd.external._sandbox import write_home
from tests.conftest import require

from .test_real_agents import real_agents_dir  # noqa: F401 - fixture

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("real_agents_dir")]

#: Generous: opencode's own start takes seconds of CPU, more on a loaded machine.
FIRST_REQUEST_S = 180.0


@pytest.fixture
def registry() -> Iterator[tuple[str, list[str]]]:
    """A package registry on loopback that answers 404 and records each path asked."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server calls it by this name
            asked.append(self.path)
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", asked
    finally:
        server.shutdown()
        server.server_close()


def test_opencode_starts_without_asking_a_package_registry(
    tmp_path: Path, registry: tuple[str, list[str]]
) -> None:
    opencode = BUILTIN["opencode"]
    require(installed(opencode), "needs `jarvis agents install opencode`")
    assert opencode.prepare is not None
    url, asked = registry
    workspace = tmp_path / "ws"
    workspace.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    (home / ".npmrc").write_text(f"registry={url}\n")
    first = asyncio.Event()

    def answer(messages: object, tools: object) -> Generation:
        first.set()
        return reply("done")

    async def scenario() -> None:
        engine = ScriptedEngine(fallback=answer)
        async with host_gateway(engine, RunContext(), "scripted", max_tokens=64) as access:
            launch = opencode.prepare(Setup(install_dir(opencode), home, access, sandboxed=False))
            await launched_to_first_request(launch, home, workspace, first)

    asyncio.run(scenario())
    assert first.is_set()
    assert asked == [], f"opencode asked the package registry for {asked}"


async def launched_to_first_request(
    launch: Launch, home: Path, workspace: Path, first: asyncio.Event
) -> None:
    """``launch`` started on the host as jarvis starts it (its HOME written), driven to
    its first request, then ended."""
    write_home(home, launch, for_sandbox=False)
    channel = await start_on_host(launch.argv, launch.env, cwd=workspace, home=home, keep_home=True)
    try:
        await _to_first_request(channel, workspace, first)
    finally:
        await channel.kill("done")
        await channel.wait()


async def _to_first_request(channel: object, workspace: Path, first: asyncio.Event) -> None:
    """initialize, session/new, then the prompt, until the engine sees its request."""

    async def send(message: dict[str, object]) -> None:
        await channel.write((json.dumps(message) + "\n").encode())  # type: ignore[attr-defined]

    await send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": 1, "clientCapabilities": {}}})  # fmt: skip
    await send({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                "params": {"cwd": str(workspace), "mcpServers": []}})  # fmt: skip

    async def session() -> str:
        while True:
            line = await channel.readline(16 * 2**20)  # type: ignore[attr-defined]
            assert line, "opencode exited before session/new answered"
            message = json.loads(line)
            if message.get("id") == 1:
                return str(message["result"]["sessionId"])

    session_id = await asyncio.wait_for(session(), FIRST_REQUEST_S)
    await send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                "params": {"sessionId": session_id,
                           "prompt": [{"type": "text", "text": "Say done."}]}})  # fmt: skip
    await asyncio.wait_for(first.wait(), FIRST_REQUEST_S)
