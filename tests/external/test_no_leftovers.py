"""After 20 runs of external agents ended every way (answered, cancelled, deaf to the
cancel, out of wall-clock time), no agent process is left: every process group jarvis
started is empty."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from jarvisd._config import parse_config
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine
from jarvisd.executors._subprocess import SubprocessChannel
from jarvisd.runs import AgentSpec, run_spec

SCENARIOS = [("work", None), ("hang", "cancel"), ("deaf", "cancel"), ("hang", "wall")] * 5


def _group(pgid: int) -> list[int]:
    alive = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def test_twenty_runs_leave_no_agent_process(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups: list[int] = []
    started = SubprocessChannel.__init__

    def record(self: SubprocessChannel, process: object, *args: object, **kw: object) -> None:
        groups.append(process.pid)  # type: ignore[attr-defined]  # start_new_session: pid == pgid
        started(self, process, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(SubprocessChannel, "__init__", record)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    agents = {
        s: {"command": [sys.executable, "-m", "jarvisd.testing.acp_agent", s]}
        for s in ("work", "hang", "deaf")
    }
    config = parse_config({"agents": {"external": agents}})
    failures = []

    async def one(scenario: str, end: str | None) -> str | None:
        run = RunContext()
        spec = AgentSpec(
            input="go", agent=scenario, isolation="host", options={"workspace": str(workspace)},
            max_wall=1.5 if end == "wall" else None,
        )  # fmt: skip
        if end == "cancel":
            asyncio.get_running_loop().call_later(1.0, run.cancel.cancel)
        engine = ScriptedEngine.from_replies([])
        outcome = await run_spec(spec, run, config, engine, trace=False)
        return None if outcome.failure is None else outcome.failure.code

    async def waves() -> None:
        # The four ways a run ends, side by side, five times over: each run waits on
        # its own timers (the cancel at 1 s, the wall at 1.5 s, the kill of the deaf
        # agent), and four agents at a time keep a loaded machine's start-up short of
        # those timers.
        for start in range(0, len(SCENARIOS), 4):
            wave = SCENARIOS[start : start + 4]
            failures.extend(await asyncio.gather(*(one(s, e) for s, e in wave)))

    asyncio.run(waves())
    assert failures == [None, "cancelled", "cancelled", "budget"] * 5
    assert len(groups) == 20
    deadline = time.monotonic() + 5
    while any(_group(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.1)  # SIGKILL is sent at once; the kernel reaps a moment later
    assert [g for g in groups if _group(g)] == []
