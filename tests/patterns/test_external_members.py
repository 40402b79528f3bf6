"""A cancel reaches a pattern member that is an external ACP agent: its process group
is gone afterwards and the tool call it left open gets a synthetic result.

The agent is jarvisd.testing.acp_agent (scenario ``open``: it starts a tool call, then
never ends its prompt, ending it as cancelled on ``session/cancel``), a real program
speaking ACP over stdio, started by jarvis's own ExternalAgent on the host or in its sandbox
container."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from jarvisd._config import parse_config
from jarvisd._events import Event, EventBus, EventType
from jarvisd._runcontext import Cancelled, RunContext
from jarvisd.agents import AgentContext
from jarvisd.executors._subprocess import SubprocessChannel
from jarvisd.external._kinds import external_agent_class
from jarvisd.patterns import Member, Parallel, Provenance, Result
from tests.conftest import require
from tests.external.test_sandboxed import IMAGE, _containers, _docker_ok

from ._helpers import Recorder, go


def _group(pgid: int) -> list[int]:
    alive = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The process groups of the agents started (start_new_session: pid == pgid)."""
    started: list[int] = []
    init = SubprocessChannel.__init__

    def record(self: SubprocessChannel, process: object, *args: object, **kw: object) -> None:
        started.append(process.pid)  # type: ignore[attr-defined]
        init(self, process, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(SubprocessChannel, "__init__", record)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    return started


def _external(tmp_path: Path, *, sandboxed: bool = False) -> Member:
    from jarvisd.engines import ScriptedEngine
    from jarvisd.patterns import AgentMember

    workspace = tmp_path / "ws"
    workspace.mkdir()
    python = "python3" if sandboxed else sys.executable
    command = [python, "-m", "jarvisd.testing.acp_agent", "open"]
    sandbox = {"image": IMAGE, "allowed_roots": [f"{tmp_path}:rw"]} if sandboxed else {}
    config = parse_config(
        {"agents": {"external": {"builder": {"command": command}}}, "sandbox": sandbox}
    )
    cls = external_agent_class("builder", config)
    assert cls is not None
    agent = cls(
        ScriptedEngine.from_replies([]),
        config=config,
        sandboxed=sandboxed,
        workspace=str(workspace),
    )
    return AgentMember(agent, "builder")


class _AfterToolStart(Member):
    """Answers once the external agent is inside its tool call (no timing guesses)."""

    name = "quick"

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        inside = asyncio.Event()
        loop = asyncio.get_running_loop()
        self.bus.subscribe(
            lambda _: loop.call_soon_threadsafe(inside.set), EventType.TOOL_CALL_START
        )
        await inside.wait()
        return Result("quick answer", Provenance.own(self.name))


def _gone(pgids: list[int]) -> list[int]:
    deadline = time.monotonic() + 5
    while any(_group(g) for g in pgids) and time.monotonic() < deadline:
        time.sleep(0.1)  # SIGKILL is sent at once; the kernel reaps a moment later
    return [g for g in pgids if _group(g)]


def _synthetic_ends(rec: Recorder) -> list[dict[str, object]]:
    return [e for e in rec.of(EventType.TOOL_CALL_END) if e.get("synthetic")]


def test_run_first_cancels_an_external_agent_inside_its_tool_call(
    tmp_path: Path, groups: list[int]
) -> None:
    rec = Recorder()
    race = Parallel([_external(tmp_path), _AfterToolStart(rec.bus)], mode="first")
    result = go(race.arun("build it", run=rec.run()))
    assert result.content == "quick answer"
    assert result.provenance.path == ("parallel", "quick")
    assert len(groups) == 1 and _gone(groups) == []
    [end] = _synthetic_ends(rec)
    assert (end["call_id"], end["tool"], end["success"]) == ("t-open", "long build", False)
    assert end["content"] == "cancelled: cancelled"
    [lost] = [e for e in rec.of(EventType.MEMBER_END) if e["member"] == "builder"]
    assert (lost["success"], lost["error"]) == (False, "cancelled")


def test_a_cancelled_run_reaches_an_external_member_mid_prompt(
    tmp_path: Path, groups: list[int]
) -> None:
    rec = Recorder()
    run = rec.run()

    def stop_when_inside(event: Event) -> None:
        run.cancel.cancel("stopped by the user")

    rec.bus.subscribe(stop_when_inside, EventType.TOOL_CALL_START)
    team = Parallel([_external(tmp_path)], mode="all")
    with pytest.raises(Cancelled):
        go(team.arun("build it", run=run))
    assert len(groups) == 1 and _gone(groups) == []
    [end] = _synthetic_ends(rec)
    assert end["call_id"] == "t-open" and end["content"] == "cancelled: stopped by the user"


@pytest.mark.docker
def test_run_first_removes_the_container_of_an_external_agent_it_cancels(
    tmp_path: Path,
) -> None:
    require(_docker_ok(), "needs a container engine (DOCKER_HOST)")
    before = set(_containers())
    rec = Recorder()
    during: list[set[str]] = []
    rec.bus.subscribe(lambda _: during.append(set(_containers())), EventType.TOOL_CALL_START)
    race = Parallel([_external(tmp_path, sandboxed=True), _AfterToolStart(rec.bus)], mode="first")
    os.chmod(tmp_path / "ws", 0o777)  # the sandbox user (not root) works in it
    result = go(race.arun("build it", run=rec.run()))
    assert result.content == "quick answer"
    assert during and during[0] - before  # it ran in a container of this test
    assert set(_containers()) <= before
    [end] = _synthetic_ends(rec)
    assert (end["call_id"], end["success"]) == ("t-open", False)
