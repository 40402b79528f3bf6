"""Fault injection against a real jarvisd on a real socket (issue 12): cancels and time
limits while a worker starts, a full disk under the store, a damaged or truncated
database, a deleted WAL, out-of-range config, a watch on a large tree, nested JSON."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jarvisd._config import Config
from jarvisd._errors import UsageError
from jarvisd.daemon import Client, TaskManager, TaskStore
from jarvisd.daemon._worker import _Host
from jarvisd.engines import ScriptedEngine
from jarvisd.protocol import FrameReader
from jarvisd.runtime import AgentSpec

from .conftest import DaemonProcess
from .test_tasks import kill_listed, standin, until

pytestmark = pytest.mark.slow

MULTI_TURN = AgentSpec(input="use calc", agent="orchestrator", tools=("calculator",))


def exchange(daemon: DaemonProcess, payload: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(20)
        s.connect(str(daemon.paths.socket))
        s.sendall(payload)
        reply: dict[str, Any] = json.loads(s.makefile("rb").readline())
        return reply


# -- 1. a cancel or time limit while the worker starts ------------------------------


def test_cancel_soon_after_submit_is_never_lost(
    jarvisd: DaemonProcess, engine: ScriptedEngine
) -> None:
    engine.latency_s = 0.05  # a run that would succeed within a second or two
    jarvisd.start()
    c = jarvisd.client
    ended = {}
    for delay in (0.0, 0.05, 0.2, 0.05, 0.2):
        info = c.submit(MULTI_TURN)
        time.sleep(delay)
        c.cancel(info.id)
        ended[info.id] = c.wait(info.id, timeout=30)
    states = {t: (i.state, i.reason) for t, i in ended.items()}
    assert all(i.state == "cancelled" for i in ended.values()), states
    assert all(i.reason == "cancelled by the user" for i in ended.values()), states


def test_time_limit_while_the_worker_starts_is_never_lost(
    jarvisd: DaemonProcess, engine: ScriptedEngine
) -> None:
    engine.latency_s = 0.05
    jarvisd.start()
    c = jarvisd.client
    tasks = [c.submit(MULTI_TURN, timeout=0.05) for _ in range(3)]
    ended = [c.wait(t.id, timeout=30) for t in tasks]
    assert [t.state for t in ended] == ["cancelled"] * 3, ended
    assert all("time limit of 0.05 s reached" in t.reason for t in ended), ended


def test_a_result_after_the_cancel_does_not_win(tmp_path: Path) -> None:
    """The worker answers a cancel with a result (its run ended before it saw the
    cancel): the task still ends cancelled."""
    python, pids_file = standin(tmp_path, "late")
    store = TaskStore(tmp_path / "tasks.db")
    store.open()

    async def scenario() -> str:
        manager = TaskManager(store, Config, python=python, cancel_grace=5.0)
        await manager.start()
        try:
            task = manager.submit(AgentSpec(input="x"))
            await until(pids_file.exists, what="the worker to run")
            await manager.cancel(task.id)
            await until(lambda: store.get(task.id).finished, what="the task to end")
            return task.id
        finally:
            await manager.stop()

    try:
        info = store.get(asyncio.run(scenario()))
        assert (info.state, info.reason, info.result) == (
            "cancelled", "cancelled by the user", None
        ), info  # fmt: skip
    finally:
        store.close()
        kill_listed(pids_file)


def test_worker_keeps_a_cancel_that_came_before_the_run() -> None:
    host = _Host(io.BytesIO(), FrameReader(io.BytesIO()))
    host._cancel("early")
    host._cancel("later")
    seen: list[str] = []
    host.on_cancel(seen.append)
    assert seen == ["early"]
    host._cancel("after")
    assert seen == ["early", "after"]


# -- 9. nested JSON -----------------------------------------------------------------


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deeply_nested_json_is_a_protocol_error(jarvisd: DaemonProcess, depth: int) -> None:
    jarvisd.start()
    nested = "[" * depth + "]" * depth
    line = f'{{"v":1,"id":"deep","op":"task.submit","spec":{{"input":"x","options":{{"a":{nested}}}}}}}\n'
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(20)
        s.connect(str(jarvisd.paths.socket))
        s.sendall(line.encode() + b'{"v":1,"id":"after","op":"ping"}\n')
        replies = s.makefile("rb")
        first = json.loads(replies.readline())
        assert first["type"] == "error" and first["code"] == "bad_request", first
        assert "nested deeper than 64 levels" in first["message"]
        assert json.loads(replies.readline())["type"] == "pong"  # the connection survives
    assert jarvisd.client.list_tasks() == []
    assert "Traceback" not in jarvisd.log_text()


def test_deeply_nested_worker_frame_is_a_frame_error() -> None:
    from jarvisd.protocol import SENTINEL, FrameError, decode_line

    with pytest.raises(FrameError, match="nested too deeply"):
        decode_line(SENTINEL + '{"kind":"event","id":"e","data":' + "[" * 100_000 + "\n")


# -- 7. out-of-range config values --------------------------------------------------


def test_out_of_range_config_is_refused_at_start_and_on_reload(jarvisd: DaemonProcess) -> None:
    jarvisd.write_config("max_concurrent = 0")
    refused = subprocess.run(
        [sys.executable, "-m", "jarvisd.daemon"], capture_output=True, text=True, timeout=30
    )
    assert refused.returncode == 78, refused.stderr
    assert "daemon.max_concurrent: expected an integer >= 1, got 0" in refused.stderr
    assert "Traceback" not in refused.stderr
    jarvisd.write_config("max_concurrent = 2")
    jarvisd.start()
    c = jarvisd.client
    for bad in ("max_frame_bytes = 10", "task_timeout = nan", "max_queued = -1"):
        jarvisd.write_config(bad)
        key = bad.split(" = ")[0]
        jarvisd.wait_for(lambda k=key: k in c.status().config_error, what=f"{bad} refused")
        assert c.status().max_concurrent == 2  # the previous config stays in force
    assert c.wait(c.submit(AgentSpec(input="still runs")).id, timeout=30).state == "succeeded"


# -- 8. a watch on a large tree -----------------------------------------------------


def make_tree(root: Path, width: int, depth: int = 2) -> int:
    """``width ** depth`` leaf directories (and their parents) under ``root``."""
    made = 0
    level = [root]
    for _ in range(depth):
        level = [parent / f"d{i}" for parent in level for i in range(width)]
        for path in level:
            path.mkdir(parents=True)
            made += 1
    return made


def test_watch_on_a_large_tree_leaves_the_daemon_answering(
    jarvisd: DaemonProcess, tmp_path: Path
) -> None:
    tree = tmp_path / "big"
    dirs = make_tree(tree, 110)  # 12 210 directories: seconds of inotify watches
    jarvisd.write_config("max_concurrent = 2\nwatch_max_dirs = 20000")
    jarvisd.start()
    answered: list[float] = []
    stop = threading.Event()

    def ping_all_along() -> None:
        client = Client(timeout=30)
        while not stop.is_set():
            client.ping()
            answered.append(time.monotonic())

    pinger = threading.Thread(target=ping_all_along)
    pinger.start()
    try:
        jarvisd.wait_for(lambda: len(answered) > 3, what="the pinger")
        sent = time.monotonic()
        origin = jarvisd.client.submit(AgentSpec(input="lint it"), watch=str(tree))
        replied = time.monotonic()
    finally:
        stop.set()
        pinger.join(30)
    # Pings go on while the tree is counted and watched: no long silence. (Watching on
    # the loop leaves one silence covering most of the submit: the watch itself.)
    times = [sent, *(t for t in answered if sent < t < replied), replied]
    silence = max(b - a for a, b in itertools.pairwise(times))
    assert silence < (replied - sent) / 4, (dirs, silence, replied - sent)
    assert jarvisd.client.status().watches == 1
    assert jarvisd.client.wait(origin.id, timeout=30).state == "succeeded"


def test_watch_on_a_tree_over_the_cap_is_refused(jarvisd: DaemonProcess, tmp_path: Path) -> None:
    tree = tmp_path / "big"
    make_tree(tree, 10)  # 111 directories
    jarvisd.write_config("max_concurrent = 2\nwatch_max_dirs = 100")
    jarvisd.start()
    with pytest.raises(UsageError, match=r"more than 100 directories to watch \(daemon.watch_max"):
        jarvisd.client.submit(AgentSpec(input="lint it"), watch=str(tree))
    assert jarvisd.client.list_tasks() == [] and jarvisd.client.status().watches == 0
    smaller = tree / "d1"
    jarvisd.client.submit(AgentSpec(input="lint it"), watch=str(smaller))
    assert jarvisd.client.status().watches == 1
