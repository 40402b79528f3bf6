"""A sandboxed CodeAct run's checkpoints and resume (issue 36), on a real container
engine: the runner waits for the host's record of a cell before running it, sends its
state after each turn, and a resume goes on from that state in a new container without
running any earlier cell again."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from jarvisd._events import Event, EventType
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine
from jarvisd.runs import AgentSpec, run_spec

from .conftest import sandbox_config
from .test_escape import our_containers

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("engine")]


def test_a_cell_waits_for_the_hosts_record_and_a_resume_runs_it_no_more(
    roots: tuple[Path, Path],
) -> None:
    _, rw = roots
    target = rw / "done.txt"
    cell = f"```python\nopen({str(target)!r}, 'a').write('ran\\n')\n```"
    engine = ScriptedEngine.from_replies([cell, *["Final Answer: ok"] * 3])
    states: list[Any] = []
    run = RunContext(checkpoint=states.append)
    written_when_recorded: list[bool] = []

    def record(event: Event) -> None:
        if event.type is EventType.TOOL_CALL_START:
            # The daemon's worker stores the event before this returns: slowly here. The
            # cell must not have run meanwhile.
            time.sleep(2.5)
            written_when_recorded.append(target.exists())

    run.bus.subscribe(record)
    spec = AgentSpec(input="write it", agent="native_openhands", isolation="sandbox",
                     mounts=(f"{rw}:rw",))  # fmt: skip
    config = sandbox_config(roots)
    outcome = asyncio.run(run_spec(spec, run, config, engine))
    assert outcome.answer == "ok", outcome
    assert written_when_recorded == [False] and target.read_text() == "ran\n"
    # A state after each turn, the program's own under the host's key.
    assert [s["agent"] for s in states] == ["sandboxed"] * len(states) and len(states) >= 2
    assert states[0]["program"]["turns"] == 1 and states[-1]["program"]["final"]["content"] == "ok"
    # Resumed from the state after the cell: the next turn, in a new session; the cell
    # does not run again.
    again = ScriptedEngine.from_replies(["Final Answer: resumed"] * 3)
    resumed = asyncio.run(run_spec(spec, RunContext(resume=states[0]), config, again))
    assert resumed.answer == "resumed", resumed
    assert target.read_text() == "ran\n"
    assert "NEW session" in again.calls[0].messages[-1].content
    assert not our_containers()
