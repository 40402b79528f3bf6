"""Fault injection against a real jarvisd on a real socket (issue 12): cancels and time
limits while a worker starts, a full disk under the store, a damaged or truncated
database, a deleted WAL, out-of-range config, a watch on a large tree, nested JSON."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from jarvisd._config import Config
from jarvisd._errors import DaemonError, StoreError, UsageError
from jarvisd.daemon import Client, TaskManager, TaskStore
from jarvisd.daemon._worker import _Host
from jarvisd.engines import ScriptedEngine
from jarvisd.protocol import FrameReader
from jarvisd.runs import AgentSpec
from tests.conftest import require

from .conftest import DaemonProcess
from .test_tasks import kill_listed, standin, until

pytestmark = pytest.mark.slow

MULTI_TURN = AgentSpec(input="use calc on 2+2", agent="orchestrator", tools=("calculator",))


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
    engine.latency_s = 0.5  # a run that would call its tool within a second
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
    # The worker stopped at the start of its run: no tool ever ran.
    ran = {t: [e.event for e in c.logs(t)].count("tool_call_start") for t in ended}
    assert sum(ran.values()) == 0, ran


def test_time_limit_while_the_worker_starts_is_never_lost(
    jarvisd: DaemonProcess, engine: ScriptedEngine
) -> None:
    engine.latency_s = 0.5
    jarvisd.start()
    c = jarvisd.client
    tasks = [c.submit(MULTI_TURN, timeout=0.05) for _ in range(3)]
    ended = [c.wait(t.id, timeout=30) for t in tasks]
    assert [t.state for t in ended] == ["cancelled"] * 3, ended
    assert all("time limit of 0.05 s reached" in t.reason for t in ended), ended
    ran = [[e.event for e in c.logs(t.id)].count("tool_call_start") for t in tasks]
    assert ran == [0, 0, 0]


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
        assert (info.state, info.reason) == ("cancelled", "cancelled by the user"), info
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


# -- 2, 3. a full disk under the store ----------------------------------------------


@pytest.fixture
def small_disk(isolated_dirs: Path) -> Iterator[Path]:
    """The state directory (the task database) on its own 2 MiB tmpfs."""
    from jarvisd._paths import paths

    require(os.getuid() == 0, "needs root to mount a small tmpfs")
    state = paths().state
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(state)],
        capture_output=True,
        text=True,
    )
    require(mounted.returncode == 0, f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield state
    finally:
        subprocess.run(["umount", "-l", str(state)], capture_output=True)


def fill(directory: Path) -> Path:
    """Write a file until the disk is full; removing it frees the space."""
    filler = directory / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_a_failed_commit_shows_the_real_sqlite_error(small_disk: Path) -> None:
    store = TaskStore(small_disk / "tasks.db")
    store.open()
    try:
        task = store.create(AgentSpec(input="x"))
        fill(small_disk)
        with pytest.raises(StoreError) as info:
            for _ in range(1000):  # until the WAL needs a block the disk does not have
                store.append_event(task.id, "note", {"text": "y" * 2000})
        assert str(info.value) == f"disk full at {small_disk}: database or disk is full"
        assert not store.db.in_transaction
    finally:
        store.close()


def daemon_tree(daemon: DaemonProcess) -> list[psutil.Process]:
    """The daemon's task workers and everything under them (not its ask workers)."""
    assert daemon.proc is not None
    found: list[psutil.Process] = []
    for child in psutil.Process(daemon.proc.pid).children():
        with contextlib.suppress(psutil.Error):
            if "jarvisd.daemon._worker" in child.cmdline():
                found += [child, *child.children(recursive=True)]
    return found


def test_a_full_disk_pauses_ends_workers_and_everything_resumes(
    jarvisd: DaemonProcess, engine: ScriptedEngine, small_disk: Path
) -> None:
    engine.latency_s = 1.5
    jarvisd.start()
    c = jarvisd.client
    tasks = [c.submit(AgentSpec(input=f"task {i}")) for i in range(3)]
    jarvisd.wait_for(
        lambda: [c.show(t.id).state for t in tasks] == ["running", "running", "queued"],
        what="two tasks running",
    )
    assert len(daemon_tree(jarvisd)) >= 2  # the two workers
    filler = fill(small_disk)
    jarvisd.wait_for(lambda: c.status().store_error != "", what="the store failure")
    st = c.status()
    assert st.store_error.startswith(f"disk full at {small_disk}"), st
    jarvisd.wait_for(lambda: c.status().stalled == 2, what="both tasks stopped")
    # No orphan: every worker (and anything it started) is gone, nothing new starts.
    jarvisd.wait_for(lambda: daemon_tree(jarvisd) == [], what="the workers to end")
    st = c.status()
    assert (st.running, st.queued, st.stalled) == (0, 1, 2), st
    with pytest.raises(DaemonError, match=f"disk full at {small_disk}"):
        c.submit(AgentSpec(input="refused"))
    status_cli = subprocess.run(
        [str(Path(sys.executable).parent / "jarvis"), "daemon", "status"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (
        f"store:   PAUSED, no task starts until it can be written: disk full at {small_disk}"
        in (status_cli.stdout)
    ), status_cli
    time.sleep(1.5)  # a retry or two while still full: nothing changes
    assert c.show(tasks[2].id).state == "queued" and daemon_tree(jarvisd) == []
    with pytest.raises(DaemonError, match="the cancel is kept, and stored once it can be"):
        c.cancel(tasks[1].id)
    filler.unlink()
    ended = [c.wait(t.id, timeout=60) for t in tasks]
    assert [t.state for t in ended] == ["succeeded", "cancelled", "succeeded"], ended
    assert ended[1].reason == "cancelled by the user"
    assert c.status().store_error == "" and c.status().stalled == 0
    resumed = [e for e in c.logs(tasks[0].id) if e.event == "task_resumed"]
    assert resumed and "the task store failed (disk full at" in resumed[0].data["reason"]
    assert c.wait(c.submit(AgentSpec(input="after")).id, timeout=30).state == "succeeded"
    assert "Traceback" not in jarvisd.log_text()


# -- 4. a damaged or truncated database ---------------------------------------------


def stored_then_stopped(daemon: DaemonProcess, count: int) -> Path:
    daemon.start()
    for i in range(count):
        daemon.client.submit(AgentSpec(input=f"task {i}"))
    assert len(daemon.client.list_tasks()) == count
    assert daemon.terminate() == 0
    return daemon.paths.database


def start_refused(daemon: DaemonProcess) -> str:
    """Start jarvisd expecting it to refuse: its one error line."""
    run = subprocess.run(
        [sys.executable, "-m", "jarvisd.daemon"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    errors = [line for line in run.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, run.stderr
    assert not daemon.paths.socket.exists()
    return errors[0]


def test_a_truncated_database_is_refused_not_started_empty(jarvisd: DaemonProcess) -> None:
    db = stored_then_stopped(jarvisd, 20)
    db.write_bytes(b"")
    line = start_refused(jarvisd)
    assert f"the task database {db} is empty or missing, yet tasks were stored" in line
    assert f"mv {db} {db}.lost; rm {db}.has-tasks" in line
    db.unlink()  # deleted altogether: the same
    assert "is empty or missing" in start_refused(jarvisd)


@pytest.mark.parametrize("where", ["header", "pages"])
def test_a_corrupt_database_is_refused_in_one_line(jarvisd: DaemonProcess, where: str) -> None:
    db = stored_then_stopped(jarvisd, 20)
    data = bytearray(db.read_bytes())
    assert len(data) >= 4 * 4096
    start = 0 if where == "header" else 4096  # the header, or the pages after it
    data[start : start + 3 * 4096] = os.urandom(3 * 4096)
    db.write_bytes(bytes(data))
    line = start_refused(jarvisd)
    assert f"the task database {db} is damaged (" in line
    assert f"move it aside to start with an empty one: mv {db} {db}.damaged" in line


def test_a_fresh_start_after_moving_aside(jarvisd: DaemonProcess) -> None:
    db = stored_then_stopped(jarvisd, 2)
    db.write_bytes(b"")
    start_refused(jarvisd)
    db.rename(db.with_name("jarvisd.db.lost"))
    db.with_name("jarvisd.db.has-tasks").unlink()
    jarvisd.start()
    assert jarvisd.client.list_tasks() == []


# -- 5. the WAL deleted while the daemon runs ---------------------------------------


def test_a_deleted_wal_is_noticed_and_nothing_is_lost_at_the_next_crash(
    jarvisd: DaemonProcess,
) -> None:
    jarvisd.start()
    c = jarvisd.client
    before = [c.submit(AgentSpec(input=f"before {i}")) for i in range(2)]
    for t in before:
        assert c.wait(t.id, timeout=30).state == "succeeded"
    wal = Path(f"{jarvisd.paths.database}-wal")
    assert wal.exists()
    wal.unlink()
    after = [c.submit(AgentSpec(input=f"after {i}")) for i in range(2)]
    for t in after:
        assert c.wait(t.id, timeout=30).state == "succeeded"
    jarvisd.wait_for(
        lambda: "-wal was deleted while jarvisd ran" in jarvisd.log_text(), what="the warning"
    )
    jarvisd.wait_for(wal.exists, what="a new WAL")
    late = c.submit(AgentSpec(input="late"))  # written to the new WAL
    assert c.wait(late.id, timeout=30).state == "succeeded"
    jarvisd.kill9()
    jarvisd.start()
    stored = {t.id: t.state for t in c.list_tasks()}
    assert stored == {t.id: "succeeded" for t in [*before, *after, late]}


def test_replies_carry_what_runs_reported_however_nested() -> None:
    from jarvisd.daemon._protocol import EventReply, encode, parse_reply

    nested: Any = "leaf"
    for _ in range(100):
        nested = [nested]
    reply = parse_reply(encode(EventReply(id="r", seq=1, event="note", data={"x": nested})))
    assert isinstance(reply, EventReply) and reply.data == {"x": nested}
