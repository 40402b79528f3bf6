"""`ask` through jarvisd when the daemon dies or stops mid-answer: the question is never
run a second time, and a stopped daemon is a clear error, not a hang. Questions are
answered in worker processes, so the daemon's own memory stays small."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

from jarvisd._errors import DaemonError
from jarvisd._messages import Generation, Message
from jarvisd._paths import ENV_VARS
from jarvisd._runcontext import RunContext
from jarvisd.daemon import DaemonHost
from jarvisd.engines import ScriptedEngine
from jarvisd.runs import AgentSpec, RunOutcome
from jarvisd.testing import OllamaStandIn

from .conftest import DaemonProcess, SlowOnCue, script

pytestmark = pytest.mark.slow


@pytest.fixture
def slow_engine() -> SlowOnCue:
    return SlowOnCue(fallback=script)


@pytest.fixture
def slow_standin(slow_engine: SlowOnCue) -> Iterator[OllamaStandIn]:
    with OllamaStandIn(slow_engine) as server:
        yield server


@pytest.fixture
def daemon(isolated_dirs: Path, slow_standin: OllamaStandIn) -> Iterator[DaemonProcess]:
    process = DaemonProcess(isolated_dirs, slow_standin.url)
    process.write_config()
    process.start()
    yield process
    if process.proc is not None and process.proc.poll() is None:
        os.kill(process.proc.pid, signal.SIGCONT)
        process.proc.kill()
        process.proc.wait(10)


def wait_for_calls(engine: ScriptedEngine, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(engine.calls) < count:
        assert time.monotonic() < deadline, "the question never reached the engine"
        time.sleep(0.02)


def test_kill9_mid_ask_is_an_error_and_the_question_is_not_run_again(
    daemon: DaemonProcess, slow_engine: SlowOnCue
) -> None:
    cli = subprocess.Popen(
        [sys.executable, "-m", "jarvisd", "ask", "a slow question"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for_calls(slow_engine, 1)
    assert daemon.proc is not None
    workers = psutil.Process(daemon.proc.pid).children(recursive=True)
    daemon.kill9()
    out, err = cli.communicate(timeout=30)
    assert cli.returncode == 1, (out, err)
    assert "jarvis: error: jarvisd closed the connection before it finished answering" in err
    assert "was not sent again" in err
    time.sleep(0.5)
    assert len(slow_engine.calls) == 1  # never asked a second time, in process or anywhere
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]


def test_a_stopped_daemon_is_a_clear_error_within_the_keepalive_timeout(
    daemon: DaemonProcess, slow_engine: SlowOnCue
) -> None:
    host = DaemonHost(keepalive=0.3)  # silence for 1.3 s is an error
    result: list[RunOutcome | BaseException] = []

    def ask() -> None:
        try:
            result.append(host.run(AgentSpec("a slow question"), RunContext()))
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=ask)
    thread.start()
    wait_for_calls(slow_engine, 1)
    assert daemon.proc is not None
    time.sleep(1.0)  # alive replies keep a slow answer going
    assert thread.is_alive()
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    thread.join(30)
    waited = time.monotonic() - stopped
    assert not thread.is_alive()
    assert isinstance(result[0], DaemonError), result
    assert "did not answer for 1.3 s (is it stopped or hung?" in str(result[0])
    assert waited < 10, waited


def test_ask_runs_in_a_worker_so_a_loaded_engine_stays_out_of_the_daemon(
    daemon: DaemonProcess,
) -> None:
    assert daemon.proc is not None
    before = {p.pid for p in psutil.Process(daemon.proc.pid).children()}
    assert before, "a warm ask worker waits before any question"
    outcome = DaemonHost().run(AgentSpec("hello"), RunContext())
    assert outcome.answer == "answer to hello"
    # The same warm worker answered; the daemon did not run the agent itself.
    assert {p.pid for p in psutil.Process(daemon.proc.pid).children()} == before
    assert "jarvisd.agents" not in daemon.log_text()
    worker = psutil.Process(next(iter(before)))
    worker.kill()  # crashed while idle, maybe not reaped yet: the question gets another
    outcome = DaemonHost().run(AgentSpec("again"), RunContext())
    assert outcome.answer == "answer to again", outcome.failure


def _ask_cli(question: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "jarvisd", "ask", question],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _ask_workers(daemon: DaemonProcess) -> list[psutil.Process]:
    assert daemon.proc is not None
    return [p for p in psutil.Process(daemon.proc.pid).children()
            if "jarvisd.daemon._askworker" in " ".join(p.cmdline())]  # fmt: skip


def a_stopped_ask_worker_fails_the_ask_with_a_clear_error(
    daemon: DaemonProcess, slow_engine: SlowOnCue, env: dict[str, str]
) -> None:
    """The ask worker stopped for the daemon's whole 60 s limit. Run, with its own
    jarvisd and directories (``env``), during the 60 s stall of
    ``test_crash_windows.py::test_a_60s_stall_of_the_daemon_fails_no_running_task``:
    the two minutes of waiting overlap."""
    cli = subprocess.Popen(
        [sys.executable, "-m", "jarvisd", "ask", "a slow question"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    wait_for_calls(slow_engine, 1)
    stopped = _ask_workers(daemon)
    for worker in stopped:
        worker.suspend()
    try:
        out, err = cli.communicate(timeout=180)
    finally:
        if cli.poll() is None:
            cli.kill()
        for worker in stopped:
            with contextlib.suppress(psutil.Error):
                worker.kill()
    assert cli.returncode == 1, (out, err)
    assert "was stopped for 60 s (SIGSTOP or a debugger?) and did not answer" in err, err
    assert daemon.client.ping()  # the daemon itself is fine


@contextlib.contextmanager
def another_daemon(root: Path) -> Iterator[tuple[DaemonProcess, SlowOnCue, dict[str, str]]]:
    """A second jarvisd beside the test's own, on a slow engine, with its own
    directories under ``root``; and the environment that names them."""
    env = dict(os.environ)
    for key, var in ENV_VARS.items():
        (root / key).mkdir(mode=0o700 if key == "runtime" else 0o777)
        env[var] = str(root / key)
    engine = SlowOnCue(fallback=script)
    with OllamaStandIn(engine) as server:
        mine = {var: os.environ[var] for var in ENV_VARS.values()}
        os.environ.update({var: env[var] for var in ENV_VARS.values()})
        try:  # DaemonProcess and its client take their paths from the environment
            process = DaemonProcess(root, server.url)
            process.write_config()
            process.start()
        finally:
            os.environ.update(mine)
        try:
            yield process, engine, env
        finally:
            if process.proc is not None and process.proc.poll() is None:
                os.kill(process.proc.pid, signal.SIGCONT)
                process.proc.kill()
                process.proc.wait(10)


class Medium(ScriptedEngine):
    """Answers "medium" questions after 3 s: the workers free up before the daemon's
    first keepalive to a queued ask (5 s), which used to be how it noticed a client
    that went away."""

    def __init__(self) -> None:
        super().__init__(fallback=script)
        self.started: list[str] = []

    async def generate(self, messages: Sequence[Message], **kwargs: Any) -> Generation:
        self.started.append(messages[-1].content)
        if "medium" in messages[-1].content:
            await asyncio.sleep(3)
        return await super().generate(messages, **kwargs)


def test_an_ask_whose_client_left_while_queued_never_reaches_the_engine(
    isolated_dirs: Path,
) -> None:
    engine = Medium()
    with OllamaStandIn(engine) as server:
        daemon = DaemonProcess(isolated_dirs, server.url)
        daemon.write_config("max_concurrent = 1")  # two ask workers
        daemon.start()
        try:
            busy = [_ask_cli("a medium question one"), _ask_cli("a medium question two")]
            deadline = time.monotonic() + 60
            while len(engine.started) < 2:  # both workers are busy
                assert time.monotonic() < deadline, daemon.log_text()
                time.sleep(0.02)
            queued = _ask_cli("the queued question")
            time.sleep(1)  # connected, waiting for a worker
            queued.kill()
            queued.communicate()
            for cli in busy:
                out, err = cli.communicate(timeout=120)
                assert cli.returncode == 0, (out, err)
            after = _ask_cli("a later question")
            out, err = after.communicate(timeout=120)
            assert after.returncode == 0 and "answer to a later question" in out, (out, err)
        finally:
            daemon.terminate()
    assert "the queued question" not in engine.started, engine.started
