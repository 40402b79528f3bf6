"""The task manager with a stand-in worker (``standin_worker.py``): cancel ends the whole
process tree, and only daemon crashes use up a task's resume attempts."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from jarvisd._config import Config
from jarvisd.daemon import TaskManager, TaskStore
from jarvisd.daemon._tasks import MAX_ATTEMPTS
from jarvisd.runs import AgentSpec

from .conftest import alive, still_alive

STANDIN = Path(__file__).with_name("standin_worker.py")


def standin(tmp_path: Path, mode: str) -> tuple[str, Path]:
    """An executable that TaskManager runs in place of ``python`` (it is passed
    ``-m jarvisd.daemon._worker``, which the stand-in ignores)."""
    pids = tmp_path / f"{mode}.pids"
    exe = tmp_path / f"worker-{mode}"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" {mode} "{pids}" "$@"\n')
    exe.chmod(0o755)
    return str(exe), pids


def listed(pids_file: Path) -> list[int]:
    return [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []


def kill_listed(pids_file: Path) -> None:
    """Never leave sleepers behind, whatever failed."""
    for pid in listed(pids_file):
        subprocess.run(["kill", "-9", str(pid)], capture_output=True)


async def until(predicate: Callable[[], object], what: str) -> None:
    try:
        async with asyncio.timeout(20):
            while not predicate():  # noqa: ASYNC110 - the state is another process's
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


@pytest.mark.parametrize("mode", ["tool", "stubborn"])
def test_cancel_ends_the_whole_process_tree(tmp_path: Path, mode: str) -> None:
    python, pids_file = standin(tmp_path, mode)
    store = TaskStore(tmp_path / "tasks.db")
    store.open()

    async def scenario() -> tuple[list[int], int]:
        manager = TaskManager(store, Config, python=python, cancel_grace=1.0)
        await manager.start()
        try:
            task = manager.submit(AgentSpec(input="x"))
            await until(pids_file.exists, what="the worker's subprocesses")
            await until(lambda: store.open_tool_calls(task.id) != [], what="the tool call")
            pids = listed(pids_file)
            worker = store.get(task.id).worker_pid
            assert worker is not None and all(alive(p) for p in [worker, *pids])
            await manager.cancel(task.id)
            await until(lambda: store.get(task.id).finished, what="the task to end")
            return pids, worker
        finally:
            await manager.stop()

    try:
        pids, worker = asyncio.run(scenario())
        left = still_alive([worker, *pids])
        assert not left, f"still running after cancel: {left}"
        info = store.get(store.ids_in("cancelled")[0])
        assert info.reason == "cancelled by the user"
        ends = [e.data for e in store.events(info.id) if e.event == "tool_call_end"]
        assert len(ends) == 1 and ends[0]["status"] == "cancelled" and ends[0]["synthetic"]
    finally:
        store.close()
        kill_listed(pids_file)


def test_only_crashes_use_up_resume_attempts(tmp_path: Path) -> None:
    python, pids_file = standin(tmp_path, "idle")
    store = TaskStore(tmp_path / "tasks.db")
    store.open()

    async def one_life(task_id: str | None) -> str:
        """One daemon life: start, (submit), let the task run, then an orderly stop."""
        manager = TaskManager(store, Config, python=python, cancel_grace=1.0)
        await manager.start()
        try:
            if task_id is None:
                task_id = manager.submit(AgentSpec(input="x")).id
            await until(pids_file.exists, what="the task to run")
        finally:
            await manager.stop()
        return task_id

    def run_until_stopped(task_id: str | None) -> str:
        try:
            task_id = asyncio.run(one_life(task_id))
            left = still_alive(listed(pids_file))
            assert not left, f"still running after the daemon stopped: {left}"
            return task_id
        finally:
            kill_listed(pids_file)
            pids_file.unlink(missing_ok=True)

    def crash_while_running(task_id: str) -> None:
        """As if a daemon died with the task running: a recovery by the next one."""
        ended = subprocess.Popen(["true"])  # a worker pid that no longer runs
        ended.wait()
        store.mark_running(task_id, ended.pid, 0.0)
        TaskManager(store, Config, python=python).recover()

    try:
        task_id = run_until_stopped(None)
        for _ in range(MAX_ATTEMPTS):  # orderly restarts never give up on a task
            assert store.get(task_id).state == "queued", store.get(task_id)
            run_until_stopped(task_id)
        assert store.get(task_id).state == "queued"
        assert store.get(task_id).attempts == MAX_ATTEMPTS + 1
        for _ in range(MAX_ATTEMPTS - 1):
            crash_while_running(task_id)
            assert store.get(task_id).state == "queued"
        crash_while_running(task_id)
        info = store.get(task_id)
        assert info.state == "interrupted", info
        assert f"the daemon died {MAX_ATTEMPTS} times while it ran" in info.reason
    finally:
        store.close()


def test_cancel_while_the_worker_starts_is_final(tmp_path: Path) -> None:
    python, pids_file = standin(tmp_path, "idle")
    store = TaskStore(tmp_path / "tasks.db")
    store.open()

    async def scenario() -> str:
        manager = TaskManager(store, Config, python=python, cancel_grace=1.0)
        await manager.start()
        try:
            task = manager.submit(AgentSpec(input="x"))
            # Yield until the scheduler took it: its worker is being started.
            while manager.queued:  # noqa: ASYNC110 - one loop step at a time, on purpose
                await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert (await manager.cancel(task.id)).state == "cancelled"
            await asyncio.sleep(1.5)  # long enough for a worker to start and report
            return task.id
        finally:
            await manager.stop()

    try:
        task_id = asyncio.run(scenario())
        info = store.get(task_id)
        assert info.state == "cancelled" and info.attempts == 0, info
        assert [e.event for e in store.events(task_id)] == ["task_end"]
        assert not pids_file.exists()  # no worker ever ran it
    finally:
        store.close()
        kill_listed(pids_file)


def test_a_run_that_cannot_resume_is_interrupted_not_restarted(tmp_path: Path) -> None:
    # A sandboxed run's state lives in its container: its checkpoint says so, and a
    # crash of the daemon under it ends it as interrupted with that reason.
    store = TaskStore(tmp_path / "tasks.db")
    store.open()
    try:
        task_id = store.create(AgentSpec("q", isolation="sandbox")).id
        ended = subprocess.Popen(["true"])
        ended.wait()
        store.mark_running(task_id, ended.pid, 0.0)
        store.save_checkpoint(
            task_id, {"resumable": False, "reason": "a sandboxed run cannot be resumed"}
        )
        TaskManager(store, Config).recover()
        info = store.get(task_id)
        assert info.state == "interrupted", info
        assert "a sandboxed run cannot be resumed" in info.reason
    finally:
        store.close()


def test_a_worker_that_lost_the_daemon_is_an_interruption_not_a_failure(
    tmp_path: Path,
) -> None:
    # Exit 75 (EX_TEMPFAIL) says the worker lost its link to the daemon: the task is
    # resumed, as after a crash, not failed "before a result".
    python, _ = standin(tmp_path, "lost")
    store = TaskStore(tmp_path / "tasks.db")
    store.open()

    async def scenario() -> str:
        manager = TaskManager(store, Config, python=python, cancel_grace=1.0)
        await manager.start()
        try:
            task = manager.submit(AgentSpec(input="x"))
            await until(lambda: store.get(task.id).finished, what="the task to end")
            return task.id
        finally:
            await manager.stop()

    try:
        task_id = asyncio.run(scenario())
        info = store.get(task_id)
        assert info.state == "succeeded", info.reason
        resumed = [e.data for e in store.events(task_id) if e.event == "task_resumed"]
        assert [r["reason"] for r in resumed] == ["the worker lost its link to the daemon"]
    finally:
        store.close()
