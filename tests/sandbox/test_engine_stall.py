"""A container engine that stops answering mid-run (stopped, paused, wedged): the run
fails within a bound with an error that names the engine, instead of reporting cell
timeouts until its task limit, and the run's containers are removed once the engine
answers again.

The real engine is put behind a small Unix-socket proxy that the test pauses (it stops
passing bytes either way, like a SIGSTOPped dockerd, without stopping the shared one)
and resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvisd._config import Config, SandboxConfig
from jarvisd._errors import SandboxUnavailable
from jarvisd._runcontext import RunContext
from jarvisd.agents import AgentRegistry
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.executors import ExecRequest
from jarvisd.runs import AgentSpec, run_spec
from jarvisd.sandbox import DockerExecutor, engine_address
from jarvisd.sandbox._reaper import pending

from .test_escape import our_containers

pytestmark = pytest.mark.docker

#: The cell whose Start frame, once it has passed to the engine, pauses the proxy.
MARKER = b"stall-marker-5d1e"


class PausableProxy:
    """Forwards connections from ``path`` to the engine's socket ``upstream``; while
    paused it passes nothing in either direction (new connections wait too)."""

    def __init__(self, upstream: str, path: Path) -> None:
        self.upstream = upstream
        self.path = path
        self.running = threading.Event()
        self.running.set()
        self.pause_on: bytes | None = None
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._closed = False
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._listener.bind(str(self.path))
        self._listener.listen(64)
        self._thread(self._accept)

    def _thread(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def pause(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def close(self) -> None:
        self._closed = True
        self.running.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for thread in self._threads:  # every pump ends within its select's 0.1 s
            thread.join(timeout=5)
        for sock in self._socks:
            sock.close()

    def _accept(self) -> None:
        while not self._closed:
            if not select.select([self._listener], [], [], 0.1)[0]:
                continue
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._socks += [client, engine]
            engine.connect(self.upstream)
            self._thread(self._pump, client, engine, True)
            self._thread(self._pump, engine, client, False)

    def _pump(self, src: socket.socket, dst: socket.socket, to_engine: bool) -> None:
        try:
            while not self._closed:
                self.running.wait()
                if not select.select([src], [], [], 0.1)[0] or not self.running.is_set():
                    continue
                data = src.recv(1 << 16)
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
                if to_engine and self.pause_on is not None and self.pause_on in data:
                    self.pause_on = None
                    self.pause()
        except OSError:
            return


@pytest.fixture
def proxy(engine: None, tmp_path: Path) -> Iterator[PausableProxy]:
    upstream = engine_address(Config()) or "unix:///var/run/docker.sock"
    assert upstream.startswith("unix://"), upstream
    proxy = PausableProxy(upstream.removeprefix("unix://"), tmp_path / "engine.sock")
    proxy.start()
    yield proxy
    proxy.close()


def stall_config(proxy: PausableProxy) -> Config:
    return Config(
        sandbox=SandboxConfig(docker_host=f"unix://{proxy.path}", engine_timeout=3.0, memory="256m")
    )


def wait_until_gone(proxy: PausableProxy, bound_s: float = 40.0) -> list[dict[str, Any]]:
    """This process's containers, once none is left and nothing waits for removal
    (a name whose create may still come is watched a while), or ``bound_s`` passed."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if not pending(f"unix://{proxy.path}") and not our_containers():
            break
        time.sleep(0.5)
    return our_containers()


def test_an_engine_that_stalls_mid_cell_fails_the_run_and_is_cleaned_up_after(
    proxy: PausableProxy,
) -> None:
    cell = f"# {MARKER.decode()}\nimport time\ntime.sleep(25)\nprint('slept')"
    agent = AgentRegistry.create(
        "native_openhands",
        ScriptedEngine(
            [
                reply("```python\nx = 1\nprint('first cell', x)\n```"),
                reply(f"```python\n{cell}\n```"),
                reply("```python\nprint('a later cell')\n```"),
                reply("Final Answer: done"),
            ]
        ),
        "scripted",
        temperature=0,
        executor=DockerExecutor(stall_config(proxy)),
        allow_network=False,
        exec_timeout=10.0,
    )
    executor = agent.code_executor
    proxy.pause_on = MARKER
    started = time.monotonic()
    with pytest.raises(SandboxUnavailable) as caught:
        asyncio.run(asyncio.wait_for(agent.arun("go"), timeout=120))
    took = time.monotonic() - started
    message = str(caught.value)
    assert "container engine stopped answering" in message
    assert str(proxy.path) in message  # it names which engine
    assert took < 90, f"the run took {took:.0f} s to fail"  # a hang bound, not a speed target
    assert not proxy.running.is_set()  # the stall really came mid-run
    # Still there while the engine is stalled; removed once it answers again.
    proxy.resume()
    left = wait_until_gone(proxy)
    executor.close()
    assert not left, [c["Id"][:12] for c in left]


def test_a_create_under_way_when_the_engine_stalls_is_removed_after(
    proxy: PausableProxy,
) -> None:
    executor = DockerExecutor(stall_config(proxy))
    executor.client()  # connected while the engine answers
    proxy.pause()

    async def main() -> None:
        with pytest.raises(SandboxUnavailable, match="stopped answering"):
            await asyncio.wait_for(
                executor.open(ExecRequest(argv=["python3", "-c", "print(1)"], timeout=30)), 60
            )

    try:
        asyncio.run(main())
    finally:
        # The create reaches the engine now: the container it makes must not stay.
        proxy.resume()
    left = wait_until_gone(proxy)
    executor.close()
    assert not left, [c["Id"][:12] for c in left]


def test_a_sandboxed_agent_whose_engine_stalls_fails_naming_it(proxy: PausableProxy) -> None:
    """``--sandbox``: the whole agent runs in the container; the engine stalls while the
    host answers its inference request."""

    def stall(messages: object, tools: object) -> Any:
        proxy.pause()
        return reply("never delivered")

    spec = AgentSpec(input="hi", agent="simple", isolation="sandbox")
    started = time.monotonic()
    outcome = asyncio.run(
        asyncio.wait_for(
            run_spec(spec, RunContext(), stall_config(proxy), ScriptedEngine([stall])), 120
        )
    )
    took = time.monotonic() - started
    assert outcome.failure is not None
    assert outcome.failure.code == "sandbox_unavailable", outcome.failure
    assert "container engine stopped answering" in outcome.failure.message
    assert took < 90, f"the run took {took:.0f} s to fail"  # a hang bound
    proxy.resume()
    left = wait_until_gone(proxy)
    assert not left, [c["Id"][:12] for c in left]
