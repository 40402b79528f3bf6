"""FrameSession with a real program (a Python process speaking frames, started by the
subprocess executor): the seam the sandboxed agent uses and external agents will."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest

from jarvisd._errors import ProtocolError
from jarvisd._messages import Message
from jarvisd._run import Budget, BudgetExceeded, RunContext
from jarvisd.bridge import FrameSession, Outcome
from jarvisd.engines import ScriptedEngine
from jarvisd.executors import ExecRequest, SubprocessExecutor
from jarvisd.protocol import ErrorFrame, InferRequest, ResultFrame, Start

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent("""
    import json, sys
    from jarvisd.protocol import (EventFrame, FrameReader, Infer, InferResult, ResultFrame,
                                  encode)
    reader = FrameReader(sys.stdin.buffer)
    start = reader.read()
    out = sys.stdout.buffer
    print("a library chatting on stdout")
    sys.stdout.flush()
    good = {"messages": [{"role": "user", "content": start.payload["question"]}],
            "model": "the program's wish", "options": {"temperature": 0.1}}
    out.write(encode(Infer(id="good", request=good)))
    out.write(encode(Infer(id="bad", request={"messages": []})))
    out.flush()
    answers = {}
    while len(answers) < 2:
        frame = reader.read()
        if isinstance(frame, InferResult):
            answers[frame.id] = frame
    out.write(encode(EventFrame(type="tool_call_start", data={"tool": "x"})))
    out.write(encode(ResultFrame(result={
        "good": answers["good"].generation["content"], "bad": answers["bad"].error})))
    out.flush()
""")


def converse(program: str, engine: ScriptedEngine, run: RunContext, **payload: str) -> Outcome:
    async def go() -> Outcome:
        request = ExecRequest(
            argv=[sys.executable, "main.py"], files={"main.py": program}, timeout=1.0,
            env={"PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        channel = await SubprocessExecutor().open(request)
        session = FrameSession(channel, engine, run, model="host-model", event_tags={"via": "t"})
        return await session.run(Start(task="agent", payload=payload))

    return asyncio.run(go())


def test_the_program_is_served_by_the_runs_engine() -> None:
    # 1.5 s of inference under a 1 s program timeout: the clock is held while it waits.
    engine = ScriptedEngine.from_replies(["forty-two"], latency_s=1.5)
    run = RunContext()
    events: list[tuple[str, dict[str, object]]] = []
    run.bus.subscribe(lambda e: events.append((e.type.value, dict(e.data))))
    outcome = converse(PROGRAM, engine, run, question="6*7?")
    assert isinstance(outcome.final, ResultFrame), outcome
    assert outcome.final.result["good"] == "forty-two"
    assert "no messages" in str(outcome.final.result["bad"])  # refused, the program goes on
    assert not outcome.process.timed_out
    call = engine.calls[0]
    assert call.model == "host-model"  # the host's choice stands
    assert list(call.messages) == [Message.user("6*7?")]
    assert call.options.temperature == 0.1
    assert ("tool_call_start", {"tool": "x", "via": "t"}) in events
    assert [e for e, _ in events].count("inference_end") == 1  # published on the host
    assert outcome.noise == ["a library chatting on stdout"]
    assert run.budget.calls == 1


def test_a_spent_budget_stops_the_program() -> None:
    run = RunContext(budget=Budget(max_calls=0))
    outcome = converse(PROGRAM, ScriptedEngine.from_replies(["never"]), run, question="q")
    assert isinstance(outcome.stopped, BudgetExceeded) and outcome.final is None


def test_a_broken_frame_is_a_protocol_error() -> None:
    program = "import sys; sys.stdout.write('@@jarvis:1@@ {not json\\n'); sys.stdout.flush()"
    with pytest.raises(ProtocolError, match="broke the frame protocol"):
        converse(program, ScriptedEngine.from_replies([]), RunContext())


def test_an_error_frame_is_the_callers_to_read() -> None:
    program = textwrap.dedent("""
        import sys
        from jarvisd.protocol import ErrorFrame, encode
        sys.stdout.buffer.write(encode(ErrorFrame(code="UsageError", message="no such tool")))
    """)
    outcome = converse(program, ScriptedEngine.from_replies([]), RunContext())
    assert isinstance(outcome.final, ErrorFrame) and outcome.final.message == "no such tool"


def test_infer_request_round_trips() -> None:
    request = InferRequest((Message.user("hi"),), "m")
    assert InferRequest.from_dict(request.to_dict()) == request
