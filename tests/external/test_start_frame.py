"""A sandboxed external agent gets what it starts with (argv, environment, config
files, working directory) through its start frame on stdin, not the container's
settings: `jarvis ask --agent NAME` leaves the gateway's token out of what the engine
shows of the container (``docker inspect``), and the agent still reaches the gateway
with it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jarvisd._config import Config
from jarvisd._messages import Generation
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.testing import OllamaStandIn
from runners.acp_forward import FrameError, read_frame, write_files
from tests.conftest import require

IMAGE = os.environ.get("JARVIS_TEST_AGENT_IMAGE", "jarvis-sandbox:latest")


def _docker() -> Any:
    try:
        from jarvisd.sandbox import connect

        return connect(Config())
    except Exception:
        return None


def _settings_of(client: Any, pid: int) -> list[str]:
    """The environment and command of the sandbox containers jarvis process ``pid``
    owns, as the engine shows them to anyone who may ask it."""
    from jarvisd.sandbox._policy import OWNER_LABEL

    owner = f"{OWNER_LABEL}={socket.gethostname()}:{pid}"
    shown: list[str] = []
    for container in client.api.containers(filters={"label": owner}):
        config = client.api.inspect_container(container["Id"])["Config"]
        shown += [*(config.get("Env") or []), *(config.get("Cmd") or [])]
    return shown


@pytest.mark.docker
def test_the_gateways_key_is_not_in_the_containers_settings(tmp_path: Path) -> None:
    client = _docker()
    require(client is not None, "needs a container engine (DOCKER_HOST)")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chmod(workspace, 0o777)
    os.chmod(tmp_path, 0o755)
    seen: list[list[str]] = []
    holder: dict[str, int] = {}

    def answer(messages: object, tools: object) -> Generation:
        # Asked while the agent runs: its container is there to be inspected.
        seen.append(_settings_of(client, holder["pid"]))
        return reply("fine")

    command = ["python3", "-m", "jarvisd.testing.acp_agent", "infer"]
    with OllamaStandIn(ScriptedEngine(fallback=answer)) as standin:
        config = tmp_path / "config.toml"
        config.write_text(
            f'[engine]\ndefault = "ollama"\nmodel = "scripted"\n'
            f'[engine.ollama]\nhost = "{standin.url}"\n'
            f'[sandbox]\nimage = "{IMAGE}"\nallowed_roots = ["{tmp_path}:rw"]\n'
            f"[agents.external.fake]\ncommand = {command!r}\n".replace("'", '"')
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "jarvisd", "ask", "--no-daemon", "--agent", "fake", "go"],
            cwd=workspace, env=dict(os.environ, JARVIS_CONFIG=str(config)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        holder["pid"] = proc.pid
        out, err = proc.communicate(timeout=300)
    client.close()
    assert proc.returncode == 0, err
    assert out.strip() == "200 200", (out, err)  # the agent reached the gateway, with its token
    assert seen and all(seen), "the agent's container was not found while it ran"
    for shown in seen:
        assert not [s for s in shown if "GATEWAY_TOKEN" in s or "JARVIS_GATEWAY" in s], shown


def _fed(data: bytes) -> int:
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    return read


def test_the_frame_is_read_to_its_newline_and_not_a_byte_more() -> None:
    fd = _fed(b'{"argv":["a"],"env":{"K":"v"},"files":{},"cwd":"/w"}\n{"jsonrpc":"2.0"}\n')
    try:
        assert read_frame(fd) == (["a"], {"K": "v"}, {}, "/w")
        assert os.read(fd, 100) == b'{"jsonrpc":"2.0"}\n'  # the agent's, untouched
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "data",
    [b"", b"not json\n", b"[]\n", b'{"argv":[],"env":{},"files":{},"cwd":"/"}\n',
     b'{"argv":["a"],"env":{"K":1},"files":{},"cwd":"/"}\n', b'{"argv":["a"]}\n',
     b"x" * (2 << 20)],
)  # fmt: skip
def test_a_bad_frame_is_refused(data: bytes) -> None:
    fd = _fed(data[:60000]) if len(data) < 60000 else None
    if fd is None:  # more than a pipe holds: from a file
        path = Path(os.environ.get("TMPDIR", "/tmp")) / f"frame-{os.getpid()}"
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY)
        path.unlink()
    try:
        with pytest.raises(FrameError):
            read_frame(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("name", ["/etc/x", "../x", "a/../../x", "a//b", ""])
def test_a_file_may_not_leave_the_home(tmp_path: Path, name: str) -> None:
    with pytest.raises(FrameError):
        write_files(str(tmp_path), {name: "x"})
    write_files(str(tmp_path), {".codex/config.toml": "k = 1\n"})
    assert (tmp_path / ".codex/config.toml").read_text() == "k = 1\n"
