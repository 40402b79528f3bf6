"""One ACP conversation with the scripted agent (a real process over stdio): updates
mapped onto the run, permissions by policy, fs confined, cancel, and every way a
hostile agent can fail ending in one clear error, with its process group gone."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import psutil
import pytest

from jarvisd._errors import ExternalAgentError, ProtocolError
from jarvisd._runcontext import Cancelled
from jarvisd.external import PermissionRequest, converse

from .conftest import MARKER, fake_agent, make_client, of_type, sync


def _group_alive(pgid: int) -> list[int]:
    alive = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def _wait_gone(pgid: int, within: float = 5.0) -> list[int]:
    """The group's live processes once they are gone or ``within`` seconds passed
    (SIGKILL is sent at once; the kernel reaps a moment later)."""
    deadline = time.monotonic() + within
    while (alive := _group_alive(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


async def _talk(scenario: str, workspace: Path, tmp_path: Path, **client_kwargs: object):
    client, run, events, deltas = make_client(workspace, **client_kwargs)  # type: ignore[arg-type]
    channel = await fake_agent(scenario, workspace, tmp_path / "home")
    pgid = channel.process.pid  # type: ignore[attr-defined]
    return client, run, events, deltas, channel, pgid


@sync
async def test_a_turn_maps_text_tools_plan_and_permission(workspace: Path, tmp_path: Path) -> None:
    client, run, events, deltas, channel, pgid = await _talk("work", workspace, tmp_path)
    stop = await converse(channel, client, cwd=workspace, prompt="go", run=run)
    assert stop == "end_turn"
    answer = client.answer_text()
    assert answer == f"read: {MARKER}; edit: allowed"  # after its last tool call
    assert "".join(deltas) == "Reading. " + answer  # all of it streamed
    (start,) = of_type(events, "tool_call_start")
    assert start.data["tool"] == "read README.md" and start.data["kind"] == "read"
    (end,) = of_type(events, "tool_call_end")
    assert end.data["success"] is True and end.data["content"] == MARKER
    assert client.tool_results[0].content == MARKER
    (plan,) = of_type(events, "agent_plan")
    assert plan.data["entries"][0] == ["in_progress", "read README.md"]
    (asked,) = of_type(events, "permission")
    assert asked.data["kind"] == "edit" and asked.data["allowed"] is True
    assert (workspace / "out.txt").read_text() == "written by the agent\n"
    assert run.budget.tool_calls == 1
    assert not _wait_gone(pgid)


@sync
async def test_a_permission_the_policy_denies_is_refused(workspace: Path, tmp_path: Path) -> None:
    client, run, events, _, channel, _ = await _talk(
        "work", workspace, tmp_path, permissions={"edit": "deny"}
    )
    await converse(channel, client, cwd=workspace, prompt="go", run=run)
    assert client.answer_text().endswith("edit: denied")
    assert not (workspace / "out.txt").exists()
    (asked,) = of_type(events, "permission")
    assert asked.data["decision"] == "deny" and asked.data["allowed"] is False


@sync
async def test_ask_goes_to_the_approver_and_without_one_is_denied(
    workspace: Path, tmp_path: Path
) -> None:
    seen: list[PermissionRequest] = []

    async def approve(request: PermissionRequest) -> bool:
        seen.append(request)
        return True

    client, run, _, _, channel, _ = await _talk(
        "work", workspace, tmp_path, permissions={"edit": "ask"}, approver=approve
    )
    await converse(channel, client, cwd=workspace, prompt="go", run=run)
    assert client.answer_text().endswith("edit: allowed")
    assert [(r.tool, r.kind) for r in seen] == [("write out.txt", "edit")]

    client, run, _, _, channel, _ = await _talk(
        "work", workspace, tmp_path, permissions={"edit": "ask"}
    )
    await converse(channel, client, cwd=workspace, prompt="go", run=run)
    assert client.answer_text().endswith("edit: denied")


@sync
async def test_cancel_mid_prompt_sends_session_cancel(workspace: Path, tmp_path: Path) -> None:
    client, run, _, _, channel, pgid = await _talk("hang", workspace, tmp_path)
    asyncio.get_running_loop().call_later(1.0, run.cancel.cancel, "stop now")
    with pytest.raises(Cancelled, match="stop now"):
        await converse(channel, client, cwd=workspace, prompt="go", run=run)
    assert not _wait_gone(pgid)


@sync
async def test_an_agent_deaf_to_cancel_is_killed_with_its_group(
    workspace: Path, tmp_path: Path
) -> None:
    client, run, _, _, channel, pgid = await _talk("deaf", workspace, tmp_path)
    asyncio.get_running_loop().call_later(1.0, run.cancel.cancel)
    with pytest.raises(Cancelled):
        await converse(channel, client, cwd=workspace, prompt="go", run=run)
    assert not _wait_gone(pgid)  # the agent and its sleeping grandchild


@pytest.mark.parametrize(
    ("scenario", "error", "words"),
    [
        ("garbage", ProtocolError, "not JSON: 'this is not json'"),
        ("huge", ProtocolError, "longer than"),
        ("exit", ExternalAgentError, "exit 3"),
        ("refuse", ExternalAgentError, "session/new with an error: authentication required"),
    ],
)
@sync
async def test_a_failing_agent_gives_one_clear_error(
    scenario: str, error: type[Exception], words: str, workspace: Path, tmp_path: Path
) -> None:
    client, run, _, _, channel, pgid = await _talk(scenario, workspace, tmp_path)
    with pytest.raises(error) as caught:
        await asyncio.wait_for(
            converse(channel, client, cwd=workspace, prompt="go", run=run, handshake_timeout=30),
            60,
        )
    assert words in str(caught.value)
    if scenario == "exit":
        assert "fake agent: giving up" in str(caught.value)
    assert not _wait_gone(pgid)


@sync
async def test_file_requests_outside_the_workspace_are_refused(
    workspace: Path, tmp_path: Path
) -> None:
    (tmp_path / "outside").write_text("secret")
    (workspace / "link").symlink_to(tmp_path / "outside")
    client, run, _, _, channel, _ = await _talk("escape", workspace, tmp_path)
    await converse(channel, client, cwd=workspace, prompt="go", run=run)
    assert client.answer_text() == "error error error"
