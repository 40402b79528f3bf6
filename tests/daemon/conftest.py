"""A real jarvisd process on a temporary socket, answering from a scripted engine
behind a real Ollama-protocol HTTP server (``OllamaStandIn``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

from jarvisd._messages import Generation, Message, Role, ToolSpec
from jarvisd.daemon import Client, DaemonPaths
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.engines._base import DEFAULT_OPTIONS
from jarvisd.engines._scripted import ScriptedCall
from jarvisd.testing import OllamaStandIn


def script(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
    """Deterministic answers keyed by the conversation.

    * "use calc" (e.g. "use calc on 2+2"): call calculator(2+2), then answer with the
      tool's result.
    * "use llm": call the llm tool (itself an engine call), then answer.
    * a prompt from the llm tool: "sub-answer".
    * anything else: "answer to <text>".
    """
    first_user = next((m.content for m in messages if m.role is Role.USER), "")
    last = messages[-1]
    if last.role is Role.TOOL:
        return reply(f"done: {last.content}")
    if "use calc" in first_user and tools:
        return reply("", ("calculator", {"expression": "2+2"}))
    if "use llm" in first_user and tools:
        return reply("", ("llm", {"prompt": "inner question"}))
    if first_user == "inner question":
        return reply("sub-answer")
    return reply(f"answer to {first_user}")


def alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def still_alive(pids: Sequence[int | None], within: float = 20.0) -> list[int]:
    """The processes of ``pids`` still running once they had ``within`` seconds to end:
    a poll, not a fixed wait (a process killed or told to stop ends a little later, and
    later still on a loaded machine)."""
    deadline = time.monotonic() + within
    while (left := [p for p in pids if p and alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


class DaemonProcess:
    def __init__(self, root: Path, standin_url: str) -> None:
        self.root = root
        self.standin_url = standin_url
        self.paths = DaemonPaths.default()
        self.config_file = Path(os.environ["JARVIS_CONFIG_DIR"]) / "config.toml"
        self.log = root / "jarvisd-test.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.client = Client(timeout=30.0)

    def write_config(self, daemon: str = "", extra: str = "") -> None:
        self.config_file.write_text(
            f'[engine]\ndefault = "ollama"\nmodel = "scripted"\n'
            f'[engine.ollama]\nhost = "{self.standin_url}"\n'
            f"[daemon]\n{daemon}\n{extra}"
        )

    def start(self) -> DaemonProcess:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jarvisd.daemon", "--log-level", "INFO"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"jarvisd exited {self.proc.returncode}:\n{self.log_text()}")
            try:
                self.client.ping()
                return self
            except Exception:
                time.sleep(0.05)
        raise AssertionError(f"jarvisd did not answer:\n{self.log_text()}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 20, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}\n{self.log_text()}")


@contextlib.contextmanager
def scripted_daemon(
    root: Path, engine: ScriptedEngine, daemon: str = "", extra: str = "", *, start: bool = True
) -> Iterator[DaemonProcess]:
    """A jarvisd on ``engine`` (served as Ollama), for tests that need the container
    engine too (they fail in CI without it); killed at the end if still running."""
    from tests.conftest import require
    from tests.sandbox.conftest import engine_problem

    problem = engine_problem()
    require(not problem, problem)
    with OllamaStandIn(engine) as standin:
        process = DaemonProcess(root, standin.url)
        process.write_config(daemon, extra)
        if start:
            process.start()
        yield process
        if process.proc is not None and process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait(10)


class SlowOnCue(ScriptedEngine):
    """Answers "slow" questions only after a minute (they are cancelled long before),
    without holding up the server's other requests."""

    async def generate(self, messages: Sequence[Message], **kwargs: Any) -> Generation:
        if any("slow" in m.content for m in messages if m.role is Role.USER):
            self.calls.append(ScriptedCall(tuple(messages), "", (), DEFAULT_OPTIONS))
            await asyncio.sleep(60)
        return await super().generate(messages, **kwargs)


@pytest.fixture
def engine() -> ScriptedEngine:
    return ScriptedEngine(fallback=script)


@pytest.fixture
def standin(engine: ScriptedEngine) -> Iterator[OllamaStandIn]:
    server = OllamaStandIn(engine)
    with server:
        yield server


@pytest.fixture
def jarvisd(isolated_dirs: Path, standin: OllamaStandIn) -> Iterator[DaemonProcess]:
    daemon = DaemonProcess(isolated_dirs, standin.url)
    daemon.write_config("max_concurrent = 2")
    yield daemon
    if daemon.proc is not None and daemon.proc.poll() is None:
        daemon.proc.kill()
        daemon.proc.wait(10)


def owned_by(pids: set[int]) -> list[str]:
    """Sandbox containers whose owner label names one of ``pids`` on this host."""
    import socket

    from jarvisd._config import Config
    from jarvisd.sandbox import connect
    from jarvisd.sandbox._policy import LABEL, OWNER_LABEL

    client = connect(Config())
    try:
        found = client.api.containers(all=True, filters={"label": f"{LABEL}=1"})
    finally:
        client.close()
    owners = {f"{socket.gethostname()}:{pid}" for pid in pids}
    return [c["Id"] for c in found if (c.get("Labels") or {}).get(OWNER_LABEL) in owners]
