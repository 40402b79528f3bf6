"""The ACP SDK is imported while the agent's container starts: when that import fails,
the run fails and the container it started is not left behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from jarvisd._config import Config
from tests.conftest import require

IMAGE = os.environ.get("JARVIS_TEST_AGENT_IMAGE", "jarvis-sandbox:latest")


def _containers_of(pid: int) -> list[str]:
    from jarvisd.sandbox import connect
    from jarvisd.sandbox._policy import OWNER_LABEL

    client = connect(Config())
    try:
        owner = f"{OWNER_LABEL}={socket.gethostname()}:{pid}"
        return [c["Id"] for c in client.api.containers(all=True, filters={"label": owner})]
    finally:
        client.close()


@pytest.mark.docker
def test_a_broken_sdk_leaves_no_container(tmp_path: Path) -> None:
    try:
        _containers_of(0)
    except Exception as exc:
        require(False, f"needs a container engine (DOCKER_HOST): {exc}")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chmod(workspace, 0o777)
    os.chmod(tmp_path, 0o755)
    broken = tmp_path / "shadow" / "acp"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        "import time\ntime.sleep(1)  # the container is up by then\n"
        "raise ImportError('this ACP SDK is broken')\n"
    )
    command = ["python3", "-m", "jarvisd.testing.acp_agent", "hang"]
    config = tmp_path / "config.toml"
    config.write_text(
        f'[sandbox]\nimage = "{IMAGE}"\nallowed_roots = ["{tmp_path}:rw"]\n'
        f"[agents.external.fake]\ncommand = {command!r}\n".replace("'", '"')
    )
    path = os.pathsep.join([str(broken.parent), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-m", "jarvisd", "ask", "--no-daemon", "--agent", "fake", "go"],
        cwd=workspace, env=dict(os.environ, JARVIS_CONFIG=str(config), PYTHONPATH=path),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0
    assert "this ACP SDK is broken" in err
    assert _containers_of(proc.pid) == []
