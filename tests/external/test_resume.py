"""``converse`` resuming a session (``session/load``), with the scripted agent of
``jarvisd.testing.acp_steps`` on the host: its sessions live in its HOME, so a new
process with the same HOME loads what an earlier one did."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jarvisd._errors import ExternalAgentError
from jarvisd.executors import Channel
from jarvisd.external import converse
from jarvisd.external._host import start_on_host
from jarvisd.external._session import RESUME_NOTE, Resume

from .conftest import make_client, of_type, sync


async def _agent(home: Path, workspace: Path, *args: str) -> Channel:
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "PYTHONPATH": os.pathsep.join(sys.path),
        "HOME": str(home),
    }
    argv = [sys.executable, "-m", "jarvisd.testing.acp_steps", "3", "0", *args]
    return await start_on_host(argv, env, cwd=workspace, home=home, keep_home=True)


def _history(home: Path, session: str) -> list[dict[str, object]]:
    lines = (home / "sessions" / f"{session}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _users(home: Path, session: str) -> list[str]:
    return [
        str(u["content"]["text"])  # type: ignore[index]
        for u in _history(home, session)
        if u["sessionUpdate"] == "user_message_chunk"
    ]


@sync
async def test_a_loaded_session_is_told_jarvis_restarted(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    sessions: list[tuple[str, bool]] = []
    client, run, _, _ = make_client(workspace)
    channel = await _agent(home, workspace)
    stop = await converse(
        channel, client, cwd=workspace, prompt="go", run=run,
        on_session=lambda s, loads: sessions.append((s, loads)),
    )  # fmt: skip
    assert stop == "end_turn" and client.answer_text() == "done: 3 steps"
    [(session, loads)] = sessions
    assert loads is True
    assert home.is_dir()  # kept for a resume (keep_home)

    # A new process, the same HOME: the session is loaded, its replay is no news.
    client, run, events, deltas = make_client(workspace)
    channel = await _agent(home, workspace)
    stop = await converse(
        channel, client, cwd=workspace, prompt="go", run=run, resume=Resume(session)
    )
    assert stop == "end_turn" and client.answer_text() == "done: 3 steps"
    assert of_type(events, "tool_call_start") == [] and deltas == ["done: 3 steps"]
    assert _users(home, session) == ["go", RESUME_NOTE]  # not the prompt again
    log = (workspace / "log.txt").read_text()
    assert log == "step 0\nstep 1\nstep 2\n"  # no step twice


def _plant(home: Path, session: str, *updates: dict[str, object]) -> None:
    folder = home / "sessions"
    folder.mkdir(parents=True)
    (folder / f"{session}.jsonl").write_text("".join(json.dumps(u) + "\n" for u in updates))


@sync
async def test_a_session_the_prompt_never_reached_gets_the_prompt(
    workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    _plant(home, "s-empty")
    client, run, _, _ = make_client(workspace)
    channel = await _agent(home, workspace)
    await converse(channel, client, cwd=workspace, prompt="go", run=run, resume=Resume("s-empty"))
    assert _users(home, "s-empty") == ["go"]
    assert client.answer_text() == "done: 3 steps"


@sync
async def test_a_replayed_call_that_never_ended_stops_the_resume(
    workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    prompt = {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "go"}}
    start = {"sessionUpdate": "tool_call", "toolCallId": "step-0", "title": "write step 0",
             "kind": "edit", "status": "in_progress"}  # fmt: skip
    _plant(home, "s-open", prompt, start)
    client, run, _, _ = make_client(workspace)
    channel = await _agent(home, workspace)
    with pytest.raises(ExternalAgentError, match=r"write step 0 \(step-0\).*effect unverified"):
        await converse(
            channel, client, cwd=workspace, prompt="go", run=run, resume=Resume("s-open")
        )
    assert not (workspace / "log.txt").exists()  # nothing was prompted
    assert _users(home, "s-open") == ["go"]


@sync
async def test_an_agent_that_cannot_load_is_not_resumed(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    client, run, _, _ = make_client(workspace)
    channel = await _agent(home, workspace, "--no-load")
    with pytest.raises(ExternalAgentError, match="no longer advertises loadSession"):
        await converse(channel, client, cwd=workspace, prompt="go", run=run, resume=Resume("s-1"))
    assert not (workspace / "log.txt").exists()


def test_task_homes_are_private_fresh_on_demand_and_swept(
    isolated_dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket
    import stat

    from jarvisd.external._homes import discard_home, homes_root, sweep_homes, task_home

    home = task_home("abc123", fresh=True)
    assert home == homes_root() / "abc123"
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(homes_root().stat().st_mode) == 0o700
    (home / "sessions").mkdir()
    # A gateway socket a killed run left: gone when the HOME is taken again.
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(home / "gateway.sock"))
    assert task_home("abc123", fresh=False) == home
    assert (home / "sessions").is_dir() and not (home / "gateway.sock").exists()
    assert not (task_home("abc123", fresh=True) / "sessions").exists()
    task_home("other1", fresh=True)
    assert sweep_homes({"abc123"}) == ["other1"]
    discard_home("../escape")  # not a task id: nothing happens
    # The daemon discards on its event loop: the HOME leaves its name at once and is
    # removed by a thread, never by the caller (a removal that blocks does not block it).
    (home / "sessions").mkdir()
    (home / "sessions" / "big").write_bytes(b"x")
    entered, release = threading.Event(), threading.Event()
    real_rmtree = shutil.rmtree

    def slow_rmtree(path: Path, **kwargs: Any) -> None:
        entered.set()
        release.wait(30)
        real_rmtree(path, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", slow_rmtree)
    discard_home("abc123")
    assert entered.wait(10) and not home.exists()
    [aside] = homes_root().iterdir()  # set aside, still being removed
    release.set()
    deadline = time.monotonic() + 30
    while aside.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sorted(p.name for p in homes_root().iterdir()) == []
    # One a dead daemon left set aside is swept with the rest.
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    aside.mkdir()
    assert sweep_homes(set()) == [aside.name]
    assert sorted(p.name for p in homes_root().iterdir()) == []
    with pytest.raises(ValueError):
        task_home("../x", fresh=True)
