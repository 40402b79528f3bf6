"""The gateway's token is bound to the run's container: a host account with the
sandbox's uid, holding the token from the agent's ``/proc/PID/environ``, connects to
the run's socket with it and is closed on without a reply. The agent inside, going
through its forwarder, is still served (tests/external/test_agent.py)."""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import tempfile

import psutil
import pytest

from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine
from jarvisd.runs import AgentSpec, run_spec
from jarvisd.sandbox._policy import SANDBOX_GID, SANDBOX_UID
from tests.conftest import require

from .test_agent import _config
from .test_sandboxed import IMAGE, _docker_ok

#: What the host account runs, given the token from the agent's environment: a
#: request on every gateway socket it can reach; prints each reply's first line.
ATTACK = r"""
import socket, sys
token = sys.argv[1]
for path in sys.argv[2:]:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        try:
            s.connect(path)
        except OSError as exc:
            print("unreachable", path, exc)
            continue
        try:
            s.sendall(f"GET /v1/models HTTP/1.0\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
            reply = s.recv(65536)
        except (BrokenPipeError, ConnectionResetError):
            reply = b""  # closed on
        except OSError as exc:
            reply = b"error " + str(exc).encode()
        print("reply", (reply.splitlines() or [b"closed"])[0].decode())
"""

#: A Python the host account can run (jarvis's own may sit under /root).
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"


def _sockets() -> set[str]:
    """Gateway sockets in agents' homes, which the sandbox uid owns."""
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "jarvis-agent-*", "*.sock")))


def _token(pid: int) -> str:
    with open(f"/proc/{pid}/environ", "rb") as file:
        env = dict(v.split(b"=", 1) for v in file.read().split(b"\0") if b"=" in v)
    return env[b"JARVIS_GATEWAY_TOKEN"].decode()


def _agent_pid(workspace: str) -> int | None:
    for proc in psutil.process_iter(["cmdline", "uids"]):
        cmdline = proc.info["cmdline"] or []
        if "jarvisd.testing.acp_agent" in cmdline and "hang" in cmdline:
            return int(proc.pid)
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="as non-root the container runs as the user")
def test_a_key_read_from_proc_is_useless_outside_the_container(workspace: object) -> None:
    require(_docker_ok(), "needs a container engine (DOCKER_HOST)")
    os.chmod(str(workspace), 0o777)
    config = _config("hang", workspace, python="python3", image=IMAGE)  # type: ignore[arg-type]
    spec = AgentSpec(input="go", agent="fake", options={"workspace": str(workspace)})
    run = RunContext()
    before = _sockets()  # other runs' (their gateways are not this test's business)

    async def attack() -> str:
        try:
            pid = None
            for _ in range(600):
                pid = await asyncio.to_thread(_agent_pid, str(workspace))
                if pid is not None:
                    break
                await asyncio.sleep(0.2)
            assert pid is not None, "the sandboxed agent never started"
            # Read here: whether this kernel lets another process of the same uid read
            # it (the review's could; hardened ones may not) is not what is tested.
            token = _token(pid)
            proc = await asyncio.create_subprocess_exec(
                SYSTEM_PYTHON, "-I", "-c", ATTACK, token, *sorted(_sockets() - before),
                user=SANDBOX_UID, group=SANDBOX_GID, extra_groups=[],
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            out, _ = await proc.communicate()
            return out.decode()
        finally:
            run.cancel.cancel("the attack is done")

    async def go() -> str:
        engine = ScriptedEngine.from_replies(["unused"])
        running = asyncio.ensure_future(run_spec(spec, run, config, engine, trace=False))
        attacking = asyncio.ensure_future(attack())
        await asyncio.wait({running, attacking}, return_when=asyncio.FIRST_COMPLETED)
        if not attacking.done():  # the run ended before the attack could start
            attacking.cancel()
            outcome = await running
            raise AssertionError(f"the run ended first: {outcome.failure}")
        await running
        return attacking.result()

    out = asyncio.run(go())
    replies = [line for line in out.splitlines() if line.startswith("reply")]
    assert replies, out  # and the socket to reach
    assert all(line == "reply closed" for line in replies), out
