"""An external agent in the sandbox: no network but the forwarder to the gateway's
socket, the workspace read-write through the mount allowlist, the agent's home
mounted, and the container gone at the end (also on cancel)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from jarvisd._config import Config, parse_config
from jarvisd._runcontext import Cancelled
from jarvisd.external import converse
from jarvisd.external._registry import AgentDefinition, GatewayAccess, Launch
from jarvisd.external._sandbox import start_in_sandbox
from jarvisd.external._workspace import Workspace
from tests.conftest import require

from .conftest import MARKER, make_client, sync

IMAGE = os.environ.get("JARVIS_TEST_AGENT_IMAGE", "jarvis-sandbox:latest")


def _docker_ok() -> bool:
    try:
        from jarvisd.sandbox import connect

        connect(Config()).close()
        return True
    except Exception:
        return False


@pytest.fixture
def sandbox_config(workspace: Path) -> Config:
    require(_docker_ok(), "needs a container engine (DOCKER_HOST)")
    # The sandbox user (not root) writes in the workspace.
    os.chmod(workspace, 0o777)
    return parse_config({"sandbox": {"image": IMAGE, "allowed_roots": [f"{workspace.parent}:rw"]}})


def _fake(scenario: str) -> AgentDefinition:
    return AgentDefinition(
        "fake", "scripted", needs_node=False,
        command=("python3", "-m", "jarvisd.testing.acp_agent", scenario),
    )  # fmt: skip


def _prepare(agent: AgentDefinition, where: Path, home: Path, access: GatewayAccess) -> Launch:
    env = {
        "HOME": str(home),
        "PYTHONPATH": "/opt/jarvis",
        "JARVIS_GATEWAY_URL": access.url,
        "JARVIS_GATEWAY_TOKEN": access.token,
    }
    return Launch(agent.command, env)


def _containers() -> list[str]:
    """This process's sandbox containers (others' tests start their own meanwhile)."""
    import socket

    from jarvisd.sandbox import connect
    from jarvisd.sandbox._policy import OWNER_LABEL

    owner = f"{OWNER_LABEL}={socket.gethostname()}:{os.getpid()}"
    client = connect(Config())
    try:
        return [c.id for c in client.containers.list(all=True, filters={"label": owner})]
    finally:
        client.close()


async def _fake_gateway(path: Path, seen: list[bytes]) -> asyncio.AbstractServer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(answer, path=str(path))
    os.chmod(path, 0o666)
    return server


@sync
async def test_a_sandboxed_agent_reaches_only_the_gateway(
    workspace: Path, tmp_path: Path, sandbox_config: Config
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(home, 0o777)
    seen: list[bytes] = []
    server = await _fake_gateway(home / "gateway.sock", seen)
    before = set(_containers())
    client, run, _, _ = make_client(workspace)
    access = GatewayAccess(f"unix:{home / 'gateway.sock'}", "tok-123", "local")
    async with server:
        channel = await start_in_sandbox(
            _fake("gateway"), Path("."), home, access, Workspace(workspace), sandbox_config,
            _prepare,
        )  # fmt: skip
        await converse(channel, client, cwd=workspace, prompt="go", run=run)
    assert client.answer_text() == "HTTP/1.0 200 OK | hello"
    assert b"Authorization: Bearer tok-123" in seen[0]
    assert set(_containers()) <= before


@sync
async def test_a_sandboxed_agent_works_in_the_workspace(
    workspace: Path, tmp_path: Path, sandbox_config: Config
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    client, run, _, _ = make_client(workspace)
    access = GatewayAccess(f"unix:{home / 'gateway.sock'}", "t", "local")
    channel = await start_in_sandbox(
        _fake("work"), Path("."), home, access, Workspace(workspace), sandbox_config, _prepare
    )
    await converse(channel, client, cwd=workspace, prompt="go", run=run)
    assert client.answer_text() == f"read: {MARKER}; edit: allowed"  # after its last tool call
    assert (workspace / "out.txt").exists()


@sync
async def test_cancel_removes_the_container(
    workspace: Path, tmp_path: Path, sandbox_config: Config
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    before = set(_containers())
    client, run, _, _ = make_client(workspace)
    access = GatewayAccess(f"unix:{home / 'gateway.sock'}", "t", "local")
    channel = await start_in_sandbox(
        _fake("deaf"), Path("."), home, access, Workspace(workspace), sandbox_config, _prepare
    )
    asyncio.get_running_loop().call_later(1.0, run.cancel.cancel)
    with pytest.raises(Cancelled):
        await converse(channel, client, cwd=workspace, prompt="go", run=run)
    assert set(_containers()) <= before
