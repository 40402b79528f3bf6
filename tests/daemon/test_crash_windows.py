"""Faults in the windows issue 38 found, against a real jarvisd, real CLI processes and
real signals: kill -9 between the model's answer and the task's end, and a daemon
stopped (SIGSTOP) for longer than any barrier used to wait."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from jarvisd._messages import Generation, Message, Role
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.testing import OllamaStandIn

from .conftest import DaemonProcess
from .test_ask_faults import a_stopped_ask_worker_fails_the_ask_with_a_clear_error, another_daemon

pytestmark = pytest.mark.slow


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jarvisd", *args], capture_output=True, text=True, timeout=timeout
    )


class AnswerThenReask(ScriptedEngine):
    """Two calculator turns, then an answer stating neither result: the loop asks once
    more for one that states them. That re-ask is held (``held`` is set) until
    ``release`` is, so the test can kill jarvisd while the answer is in the history."""

    def __init__(self) -> None:
        super().__init__()
        self.held = threading.Event()
        self.release = threading.Event()
        self.last_roles: list[Role] = []

    async def generate(self, messages: Sequence[Message], **kwargs: Any) -> Generation:
        self.last_roles.append(messages[-1].role)
        results = [m for m in messages if m.role is Role.TOOL]
        if messages[-1].role is Role.TOOL:
            if len(results) == 1:
                return reply("", ("calculator", {"expression": "2+3"}))
            return reply("All done.")
        if "did not state the values" in messages[-1].content:  # the re-ask
            if not self.release.is_set():
                self.held.set()
                while not self.release.is_set():  # noqa: ASYNC110 - set by another thread
                    await asyncio.sleep(0.05)
            return reply("The results are 2 and 5.")
        if messages[-1].role is Role.USER:
            return reply("", ("calculator", {"expression": "1+1"}))
        return reply("asked again with its own answer last")


@pytest.fixture
def reasking() -> AnswerThenReask:
    return AnswerThenReask()


@pytest.fixture
def reask_daemon(isolated_dirs: Path, reasking: AnswerThenReask) -> Iterator[DaemonProcess]:
    with OllamaStandIn(reasking) as server:
        daemon = DaemonProcess(isolated_dirs, server.url)
        daemon.write_config("max_concurrent = 2")
        yield daemon
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait(10)


def test_kill9_after_the_answer_does_not_ask_the_model_again_with_it(
    reask_daemon: DaemonProcess, reasking: AnswerThenReask
) -> None:
    reask_daemon.start()
    submitted = cli("task", "submit", "--agent", "orchestrator", "--max-turns", "4",
                    "-t", "calculator", "work out 1+1 and 2+3")  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    task_id = submitted.stdout.strip()
    assert reasking.held.wait(60), reask_daemon.log_text()
    # The answer is in the run's history; the task has not ended.
    reask_daemon.kill9()
    reasking.release.set()
    reask_daemon.start()
    waited = cli("task", "wait", task_id)
    shown = reask_daemon.client.show(task_id)
    assert waited.returncode == 0, (waited.stdout, waited.stderr, shown.reason)
    assert shown.state == "succeeded" and shown.result is not None
    assert shown.result["answer"] == "The results are 2 and 5."
    # The model was never asked with its own answer as the last message, and neither
    # calculator call ran twice.
    assert Role.ASSISTANT not in reasking.last_roles, reasking.last_roles
    events = [e.event for e in reask_daemon.client.logs(task_id)]
    assert events.count("tool_call_start") == 2 and "task_resumed" in events


class Slow(ScriptedEngine):
    """Each reply takes a few seconds: tasks are mid-run when jarvisd is stopped."""

    async def generate(self, messages: Sequence[Message], **kwargs: Any) -> Generation:
        await asyncio.sleep(3)
        first = next(m.content for m in messages if m.role is Role.USER)
        if messages[-1].role is Role.TOOL:
            return reply(f"done: {messages[-1].content}")
        if "calc" in first:
            return reply("", ("calculator", {"expression": "2+2"}))
        return reply(f"answer to {first}")


@pytest.fixture
def slow_daemon(isolated_dirs: Path) -> Iterator[DaemonProcess]:
    with OllamaStandIn(Slow()) as server:
        daemon = DaemonProcess(isolated_dirs, server.url)
        daemon.write_config("max_concurrent = 3")
        yield daemon
        if daemon.proc is not None and daemon.proc.poll() is None:
            os.kill(daemon.proc.pid, signal.SIGCONT)
            daemon.proc.kill()
            daemon.proc.wait(10)


def test_a_60s_stall_of_the_daemon_fails_no_running_task(
    slow_daemon: DaemonProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Another 60 s wait, an ask worker stopped on a second jarvisd (test_ask_faults),
    # runs in a thread meanwhile: its assertions are its own, checked at the end.
    with another_daemon(tmp_path_factory.mktemp("jv2")) as (asker, engine, env):
        errors: list[BaseException] = []

        def ask_worker_stall() -> None:
            try:
                a_stopped_ask_worker_fails_the_ask_with_a_clear_error(asker, engine, env)
            except BaseException as exc:
                errors.append(exc)

        other = threading.Thread(target=ask_worker_stall)
        other.start()
        try:
            _a_60s_stall(slow_daemon)
        finally:
            other.join(240)
        assert not other.is_alive(), "the ask worker's stall did not end"
        if errors:
            raise errors[0]


def _a_60s_stall(slow_daemon: DaemonProcess) -> None:
    slow_daemon.start()
    assert slow_daemon.proc is not None
    ids = []
    for text in ("use calc on 2+2", "use calc on 2+2", "plain three"):
        args = ["-t", "calculator", "--agent", "orchestrator"] if "calc" in text else []
        done = cli("task", "submit", *args, text)
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    c = slow_daemon.client
    slow_daemon.wait_for(lambda: all(c.show(t).state == "running" for t in ids), what="running")
    # `task wait` and `task logs -f` following when the daemon stops say so, instead
    # of hanging for the whole stall.
    followers = [
        subprocess.Popen([sys.executable, "-m", "jarvisd", "task", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for args in (("wait", ids[0]), ("logs", "-f", ids[1]))
    ]  # fmt: skip
    time.sleep(1)
    os.kill(slow_daemon.proc.pid, signal.SIGSTOP)
    time.sleep(60)
    # The follower gave up during the stall, saying why (checked once the tasks are).
    ended = [f.poll() is not None for f in followers]
    os.kill(slow_daemon.proc.pid, signal.SIGCONT)
    final = {t: c.wait(t, timeout=120) for t in ids}
    assert {t: (i.state, i.reason) for t, i in final.items()} == {t: ("succeeded", "") for t in ids}
    answers = sorted(str(i.result and i.result["answer"]) for i in final.values())
    assert answers == ["answer to plain three", "done: 4", "done: 4"]
    for follower, follower_ended in zip(followers, ended, strict=True):
        if not follower_ended:
            follower.kill()
        out, err = follower.communicate(timeout=30)
        assert follower_ended and follower.returncode != 0, (out, err)
        assert "jarvisd stopped answering" in err, err
