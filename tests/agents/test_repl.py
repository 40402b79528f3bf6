"""The shared REPL session (``runners.repl`` + ``agents._repl``) on the host-process
backend: state persists, a stopped cell is rolled back and the session goes on, output
is bounded in bytes, and nothing a cell started outlives the cell's stop or the session."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from jarvisd.agents._repl import CellResult, ReplSession
from jarvisd.executors import SubprocessExecutor


def session(**kw: Any) -> ReplSession:
    kw.setdefault("exec_timeout", 1.5)
    kw.setdefault("session_timeout", 120.0)
    return ReplSession(SubprocessExecutor(), **kw)


def with_session(body: Callable[[ReplSession], Awaitable[Any]], **kw: Any) -> Any:
    async def go() -> Any:
        repl = session(**kw)
        try:
            return await body(repl)
        finally:
            await repl.close()

    return asyncio.run(go())


def processes_running(token: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if token.encode() in cmdline and b"sleep" in cmdline:
                found.append(int(name))
    return found


def wait_gone(token: str) -> list[int]:
    """The processes still running ``sleep TOKEN`` once SIGKILL has had time to land."""
    import time

    for _ in range(50):
        alive = processes_running(token)
        if not alive:
            return []
        time.sleep(0.1)
    return processes_running(token)


def test_variables_imports_and_files_persist_from_cell_to_cell() -> None:
    async def body(repl: ReplSession) -> list[CellResult]:
        return [
            await repl.execute("import json\nx = 6 * 7\nopen('note.txt', 'w').write('kept')"),
            await repl.execute("print('between')"),
            await repl.execute("print(x, json.dumps([1]), open('note.txt').read())\nx + 1"),
        ]

    first, _, third = with_session(body)
    assert first.error is None
    assert third.stdout.split() == ["42", "[1]", "kept", "43"]


@pytest.mark.parametrize(
    "stuck",
    [
        "while True: pass",
        "try:\n    while True: pass\nexcept BaseException:\n    while True: pass",
        # Catastrophic backtracking: C code that never checks for signals.
        "import re\nre.match(r'(a+)+$', 'a' * 64 + 'b')",
        "import time\ntime.sleep(600)",
    ],
)
def test_a_stuck_cell_is_killed_and_the_session_keeps_its_earlier_state(stuck: str) -> None:
    async def body(repl: ReplSession) -> list[CellResult]:
        return [
            await repl.execute("x = 1"),
            await repl.execute(f"x = 2\nprint('started', flush=True)\n{stuck}"),
            await repl.execute("print(x)"),
        ]

    _, stopped, after = with_session(body, exec_timeout=1.0)
    assert stopped.stopped and not stopped.restarted
    assert "timed out after 1 s" in (stopped.error or "")
    assert "earlier cells are kept" in (stopped.error or "")
    assert stopped.stdout.strip() == "started"  # what it printed before it was stopped
    assert after.stdout.strip() == "1" and after.error is None  # rolled back, not lost


def test_what_a_stopped_cell_started_is_killed_with_it() -> None:
    token = str(uuid.uuid4().int % 10**6 + 10**6)

    async def body(repl: ReplSession) -> CellResult:
        await repl.execute(f"import subprocess\np = subprocess.Popen(['sleep', '{token}'])")
        assert processes_running(token)  # a committed cell's child lives on
        return await repl.execute(f"subprocess.Popen(['sleep', '{token}.5'])\nwhile True: pass")

    async def check(repl: ReplSession) -> None:
        result = await body(repl)
        assert result.stopped
        assert wait_gone(f"{token}.5") == []  # the stopped cell's child is gone
        assert processes_running(token)  # the earlier one stays with the session

    with_session(check, exec_timeout=1.0)
    assert wait_gone(token) == []  # and goes with the session


def test_a_cancel_that_lands_while_the_session_closes_still_reaps_its_process() -> None:
    # A run's stop cancels the cell, whose session then closes; the tool call around it
    # is cancelled too, while the REPL is being reaped. That second cancel used to cut
    # the reaping short: the process, its pipes and its directory were left behind.
    async def go() -> Any:
        repl = session(exec_timeout=60.0)
        await repl.execute("x = 1")
        channel = repl.channel
        cell = asyncio.ensure_future(repl.execute("while True: pass"))
        await asyncio.sleep(0.3)
        cell.cancel()  # the cell stops: the session closes
        await asyncio.sleep(0)  # the session has killed its REPL and waits for its end
        cell.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cell
        return channel

    channel = asyncio.run(go())
    assert channel.process.returncode is not None  # reaped before the cancel went on
    assert not channel.workdir.exists()


def test_output_is_bounded_in_bytes_and_includes_child_processes() -> None:
    async def body(repl: ReplSession) -> list[CellResult]:
        return [
            await repl.execute("print('é' * 5000)"),
            await repl.execute("import os, sys\nos.system('echo from-child; echo err >&2')"),
            await repl.execute("while True: print('x' * 1000)"),
        ]

    big, child, flood = with_session(body, max_output_bytes=100, exec_timeout=1.0)
    assert big.stdout == "é" * 50 + "\n[... output truncated: 9901 more bytes]"
    assert "from-child" in child.stdout and "err" in child.stdout
    assert flood.stopped and not flood.restarted  # stopped alone, its output cut
    assert flood.stdout.startswith("x" * 100 + "\n[... output truncated:")


def test_a_cell_that_ends_its_own_process_is_rolled_back() -> None:
    async def body(repl: ReplSession) -> list[CellResult]:
        return [
            await repl.execute("x = 'kept'"),
            await repl.execute("import os\nx = 'lost'\nos._exit(3)"),
            await repl.execute("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"),
            await repl.execute("print(x)"),
        ]

    _, exited, killed, after = with_session(body)
    assert "exited with status 3" in (exited.error or "") and exited.stopped
    assert "SIGKILL" in (killed.error or "")
    assert after.stdout.strip() == "kept"


def test_a_session_whose_process_dies_is_restarted_and_says_what_was_lost() -> None:
    async def body(repl: ReplSession) -> list[CellResult]:
        await repl.execute("x = 1")
        # Kill the supervisor and every kernel: the whole session is gone.
        result = await repl.execute("import os, signal\nos.killpg(os.getpgrp(), signal.SIGKILL)")
        return [result, await repl.execute("print('x' in dir())")]

    lost, after = with_session(body, variables={"context": "c"})
    assert lost.restarted and "variables, imports and files from earlier cells are gone" in (
        lost.error or ""
    )
    assert "context are set again" in (lost.error or "")
    assert after.stdout.strip() == "False"


def test_a_cell_cannot_read_the_sessions_frames() -> None:
    async def body(repl: ReplSession) -> CellResult:
        return await repl.execute("import sys\nprint(repr(sys.stdin.read()))")

    assert with_session(body).stdout.strip() == "''"


def test_cell_results_are_read_once_from_the_wire() -> None:
    assert CellResult.from_wire({"stdout": None, "error": 3}) == CellResult("", "3")
    stopped = CellResult.from_wire({"killed": "killed by SIGSEGV"})
    assert stopped.stopped and "SIGSEGV" in (stopped.error or "")


def test_a_resumed_codeact_run_runs_no_cell_again_and_is_told_its_session_is_new(
    tmp_path: Path,
) -> None:
    # Issue 36: a resume no longer replays earlier cells to rebuild the session (their
    # effects would happen twice). The first run stops after one cell (max_turns); a new
    # agent resumes from its checkpoint in a fresh session, where `x` is gone, and the
    # model is told so plainly.
    from jarvisd._runcontext import RunContext
    from jarvisd.agents import AgentRegistry
    from jarvisd.engines import ScriptedEngine, reply

    def codeact(engine: ScriptedEngine, **kw: Any) -> Any:
        return AgentRegistry.create("native_openhands", engine, "scripted",
                                    executor=SubprocessExecutor(), allow_network=False, **kw)  # fmt: skip

    log = tmp_path / "cells.log"
    cell = f"x = 41\nopen({str(log)!r}, 'a').write('ran\\n')\nprint('set')"
    states: list[Any] = []
    first = codeact(ScriptedEngine([reply(f"```python\n{cell}\n```")]), max_turns=1)
    asyncio.run(first.arun("q", run=RunContext(checkpoint=states.append)))
    engine = ScriptedEngine(
        [reply("```python\nprint('x' in dir())\n```"), reply("Final Answer: ok")]
    )
    result = asyncio.run(codeact(engine).arun("q", run=RunContext(resume=states[-1])))
    assert result.metadata["resumed"] is True
    assert log.read_text() == "ran\n"  # the first cell ran once, not again on resume
    assert [r.content for r in result.tool_results][-1] == "False"  # a new session
    told = engine.calls[0].messages[-1].content
    assert "Observation: set" in told and "NEW session" in told
    assert "Variables, imports and functions from earlier cells are gone" in told
    assert "Files in the workspace are as the earlier cells left them" in told
