"""HostTools and the tool frames of a FrameSession, without a container engine: a real
program (a Python process speaking frames) calls host tools that record what runs.
The sandboxed runs with real MCP servers are in tests/sandbox/test_sandboxed_mcp.py."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pytest

from jarvisd._messages import ToolSpec
from jarvisd._runcontext import Budget, BudgetExceeded, Cancelled, RunContext
from jarvisd.bridge import FrameSession, HostTools, Outcome
from jarvisd.bridge._session import MAX_CONCURRENT_TOOLS
from jarvisd.bridge._tools import ANSWER_MARGIN_S, MAX_RESULT_BYTES
from jarvisd.engines import ScriptedEngine
from jarvisd.executors import ExecRequest, SubprocessExecutor
from jarvisd.protocol import OfferedTool, ResultFrame, Start, ToolFrame
from jarvisd.runs._sandboxed import CALLS_PER_TURN, program_budget
from jarvisd.tools import BaseTool

ROOT = Path(__file__).resolve().parents[2]


class Recorder(BaseTool):
    """A host tool that records its calls (and how many run at once), waiting
    ``seconds`` before it answers with ``reply`` repeated ``times`` times."""

    tool_id: ClassVar[str] = "recorder"

    def __init__(self, name: str = "demo.add", reply: str = "ok", seconds: float = 0.0) -> None:
        self.name, self.reply, self.seconds = name, reply, seconds
        self.calls: list[dict[str, Any]] = []
        self.running = self.most = 0
        self.cancelled = 0
        self.timeout = 5.0

    @property
    def spec(self) -> ToolSpec:
        schema = {"type": "object", "properties": {"times": {"type": "integer"}},
                  "required": ["times"]}  # fmt: skip
        return ToolSpec(self.name, "records its calls", schema)

    async def execute(self, **params: Any) -> str:
        self.calls.append(params)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1
        return self.reply * int(params["times"])


def call(tools: HostTools, name: str = "demo.add", **arguments: Any) -> Any:
    return asyncio.run(tools.call(ToolFrame(id="c1", tool=name, arguments=arguments)))


def test_a_tool_that_was_not_offered_is_refused_and_nothing_runs() -> None:
    tool, run = Recorder(), RunContext()
    reply = call(HostTools([tool], run), "demo.pause", times=1)
    assert (reply.id, reply.success) == ("c1", False)
    assert "no tool 'demo.pause' was offered to this run (offered: demo.add)" in reply.content
    assert tool.calls == [] and run.budget.tool_calls == 0


def test_arguments_the_schema_refuses_run_nothing() -> None:
    tool = Recorder()
    reply = call(HostTools([tool], RunContext()), times="many")
    assert not reply.success and "invalid arguments for demo.add" in reply.content
    assert tool.calls == []


def test_a_result_is_cut_to_its_byte_bound_on_a_character_boundary() -> None:
    tool = Recorder(reply="é")  # two bytes in UTF-8
    reply = call(HostTools([tool], RunContext()), times=MAX_RESULT_BYTES)
    kept, _, note = reply.content.partition("\n[... truncated: ")
    assert reply.success and len(kept) == MAX_RESULT_BYTES // 2 and set(kept) == {"é"}
    assert note == f"{MAX_RESULT_BYTES} more bytes]"


def test_calls_are_counted_on_the_runs_ledger_and_a_spent_cap_stops_the_run() -> None:
    tool, run = Recorder(), RunContext(budget=Budget(max_tool_calls=1))
    tools = HostTools([tool], run)
    assert call(tools, times=1).success
    with pytest.raises(BudgetExceeded, match="tool-call budget of 1 calls spent"):
        call(tools, times=1)
    assert len(tool.calls) == 1 and run.budget.tool_calls == 1
    assert run.cancel.cancelled and isinstance(run.cancel.error(), BudgetExceeded)


def test_the_programs_own_ledger_caps_calls_too() -> None:
    tool, run = Recorder(), RunContext()
    tools = HostTools([tool], run, budget=Budget(max_tool_calls=1))
    call(tools, times=1)
    with pytest.raises(BudgetExceeded):
        call(tools, times=1)
    assert len(tool.calls) == 1 and run.budget.tool_calls == 1  # the refused one given back


def test_a_stopped_run_starts_no_call() -> None:
    tool, run = Recorder(), RunContext()
    run.cancel.cancel("stop")
    with pytest.raises(Cancelled):
        call(HostTools([tool], run), times=1)
    assert tool.calls == []


def test_a_call_past_the_tools_timeout_is_an_error_result() -> None:
    tool = Recorder(seconds=30)
    tool.timeout = 0.2
    reply = call(HostTools([tool], RunContext()), times=1)
    assert not reply.success and reply.content == "Error: demo.add timed out after 0.2 s."


def test_tools_are_offered_with_a_longer_wait_than_the_host_gives_them() -> None:
    (offered,) = HostTools([Recorder()], RunContext()).offered()
    assert offered.spec.name == "demo.add" and offered.timeout == 5.0 + ANSWER_MARGIN_S
    assert OfferedTool.from_dict(offered.to_dict()) == offered


def test_the_program_gets_a_tool_call_cap_when_the_run_sets_none() -> None:
    own = program_budget(Budget(), max_turns=2, max_tokens=100)
    assert own is not None and own.max_tool_calls == 2 * CALLS_PER_TURN
    capped = program_budget(Budget(max_calls=5, max_tool_calls=3), 2, 100)
    assert capped is None  # the run's caps stand alone


# -- a FrameSession serving a real program's tool frames -----------------------------------

FLOOD = textwrap.dedent("""
    import sys
    from jarvisd.protocol import FrameReader, ResultFrame, ToolFrame, ToolResultFrame, encode
    reader = FrameReader(sys.stdin.buffer)
    start = reader.read()
    out = sys.stdout.buffer
    n = start.payload["n"]
    for i in range(n):  # all at once: the host must not start them all at once
        out.write(encode(ToolFrame(id=f"t{i}", tool="demo.add", arguments={"times": 1})))
    out.flush()
    answers = []
    while len(answers) < n:
        frame = reader.read()
        if isinstance(frame, ToolResultFrame):
            answers.append(frame.content)
    out.write(encode(ResultFrame(result={"answers": answers})))
    out.flush()
""")


async def serve(program: str, tool: Recorder, run: RunContext, **payload: Any) -> Outcome:
    request = ExecRequest(
        argv=[sys.executable, "main.py"], files={"main.py": program}, timeout=1.0,
        env={"PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    channel = await SubprocessExecutor().open(request)
    session = FrameSession(channel, ScriptedEngine.from_replies([]), run, tools=[tool])
    return await session.run(Start(task="agent", payload=payload))


def test_a_flood_of_tool_frames_is_served_a_few_at_a_time() -> None:
    # 12 calls of 0.3 s under a 1 s program timeout: the clock is held while it waits.
    tool = Recorder(reply="done", seconds=0.3)
    outcome = asyncio.run(serve(FLOOD, tool, RunContext(), n=12))
    assert isinstance(outcome.final, ResultFrame), outcome
    assert outcome.final.result["answers"] == ["done"] * 12
    assert tool.most == MAX_CONCURRENT_TOOLS and not outcome.process.timed_out


def test_cancelling_the_run_stops_a_call_in_flight() -> None:
    tool, run = Recorder(seconds=60), RunContext()

    async def go() -> tuple[float, Outcome]:
        task = asyncio.ensure_future(serve(FLOOD, tool, run, n=1))
        while not tool.calls:  # noqa: ASYNC110 - wait until the call is in the tool's hands
            await asyncio.sleep(0.02)
        loop = asyncio.get_running_loop()
        start = loop.time()
        run.cancel.cancel("user pressed stop")
        outcome = await task
        return loop.time() - start, outcome

    took, outcome = asyncio.run(go())
    assert took < 3.0 and outcome.final is None
    assert tool.cancelled == 1 and tool.running == 0
