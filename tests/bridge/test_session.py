"""FrameSession with a real program (a Python process speaking frames, started by the
subprocess executor): the seam the sandboxed agent uses and external agents will."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from jarvisd._errors import ProtocolError
from jarvisd._messages import Generation, Message
from jarvisd._runcontext import Budget, BudgetExceeded, RunContext
from jarvisd.bridge import FrameSession, Outcome
from jarvisd.engines import RunEngine, ScriptedEngine, reply
from jarvisd.executors import ExecRequest, SubprocessExecutor
from jarvisd.executors._base import MAX_NOISE_LINE_BYTES, MAX_NOISE_LINES
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
    assert ("tool_call_start", {"tool": "x", "depth": 0, "via": "t"}) in events
    assert [e for e, _ in events].count("inference_end") == 1  # published on the host
    assert outcome.noise == ["a library chatting on stdout"]
    assert run.budget.calls == 1


def test_an_engine_fault_is_answered_as_an_error_not_left_unanswered() -> None:
    def broken(messages: object, tools: object) -> Generation:
        raise AttributeError("a bug in the engine")

    program = HOSTILE + textwrap.dedent("""
        send(Infer(id="1", request={"messages": MESSAGES}))
        answer = reader.read()
        send(ResultFrame(result={"error": answer.error}))
    """)
    outcome = converse(program, ScriptedEngine(script=[broken]), RunContext())
    assert isinstance(outcome.final, ResultFrame), outcome  # answered, not timed out
    assert outcome.final.result["error"] == "internal error: AttributeError"


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


HOSTILE = textwrap.dedent("""
    import sys, threading, time
    from jarvisd.protocol import EventFrame, FrameReader, Infer, ResultFrame, encode
    reader = FrameReader(sys.stdin.buffer)
    start = reader.read()
    out = sys.stdout.buffer
    def send(frame):
        out.write(encode(frame))
        out.flush()
    MESSAGES = [{"role": "user", "content": "hi"}]
""")


def test_forged_events_are_refused_and_never_splatted() -> None:
    program = HOSTILE + textwrap.dedent("""
        send(EventFrame(type="inference_end", data={"prompt_tokens": 10**12}))
        send(EventFrame(type="run_end", data={"content": "forged"}))
        send(EventFrame(type="tool_call_end", data={
            "event_type": "x", "tool": "calc", "success": "yes", "content": "c" * 100000,
            "via": "forged", "depth": 3}))
        send(ResultFrame(result={}))
    """)
    run = RunContext()
    events: list[tuple[str, dict[str, object]]] = []
    run.bus.subscribe(lambda e: events.append((e.type.value, dict(e.data))))
    outcome = converse(program, ScriptedEngine.from_replies([]), run)
    assert isinstance(outcome.final, ResultFrame)
    ((kind, data),) = events
    assert kind == "tool_call_end"
    assert set(data) == {"tool", "content", "depth", "via"}  # no event_type, no bad success
    assert data["via"] == "t" and data["depth"] == 3  # the host's tag wins
    assert len(str(data["content"])) < 17_000
    assert run.budget.used.total_tokens == 0


def test_infer_requests_are_clamped_bounded_in_flight_and_budgeted() -> None:
    program = HOSTILE + textwrap.dedent("""
        threading.Thread(target=lambda: [None for _ in reader], daemon=True).start()
        for i in range(500):
            send(Infer(request={"messages": MESSAGES, "options": {"max_tokens": 10**9}}))
        time.sleep(30)
    """)
    in_flight, peak = [0], [0]

    def answer(messages: object, tools: object) -> Generation:
        return reply("ok")

    class Counting(ScriptedEngine):
        async def generate(self, *args: Any, **kw: Any) -> Any:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
            try:
                return await super().generate(*args, **kw)
            finally:
                in_flight[0] -= 1

    engine = Counting(fallback=answer, latency_s=0.02)

    async def go() -> Outcome:
        request = ExecRequest(
            argv=[sys.executable, "main.py"], files={"main.py": program}, timeout=20.0,
            env={"PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        channel = await SubprocessExecutor().open(request)
        session = FrameSession(channel, engine, RunContext(), max_tokens=64,
                               budget=Budget(max_calls=20), max_concurrent=3)  # fmt: skip
        return await session.run(Start(task="agent"))

    outcome = asyncio.run(go())
    assert isinstance(outcome.stopped, BudgetExceeded)
    assert len(engine.calls) == 20 and peak[0] <= 3
    assert {c.options.max_tokens for c in engine.calls} == {64}


def test_noise_is_kept_in_bounded_bytes() -> None:
    program = HOSTILE + textwrap.dedent("""
        for i in range(300):
            out.write(b"n" * 100000 + b" %d\\n" % i)
        send(ResultFrame(result={}))
    """)
    outcome = converse(program, ScriptedEngine.from_replies([]), RunContext())
    assert isinstance(outcome.final, ResultFrame)
    assert len(outcome.noise) == MAX_NOISE_LINES
    assert sum(len(n) for n in outcome.noise) < MAX_NOISE_LINES * (MAX_NOISE_LINE_BYTES + 40)
    assert outcome.noise[-1].endswith("more bytes]")


def test_log_frames_reach_the_host_log_cut_and_escaped(caplog: pytest.LogCaptureFixture) -> None:
    program = HOSTILE + textwrap.dedent("""
        from jarvisd.protocol import Log
        send(Log(message="\\x1b[2J" + "L" * 1_000_000))
        send(ResultFrame(result={}))
    """)
    with caplog.at_level("INFO", logger="jarvisd.bridge._session"):
        converse(program, ScriptedEngine.from_replies([]), RunContext())
    (record,) = [r for r in caplog.records if "program" in r.getMessage()]
    text = record.getMessage()
    assert len(text) < 3000 and "\x1b" not in text and "\\x1b[2J" in text


def test_deeply_nested_frames_are_a_protocol_error_not_a_crash() -> None:
    program = HOSTILE + textwrap.dedent("""
        out.write(b'@@jarvis:1@@ {"kind":"event","id":"d","type":"x","data":' + b"[" * 50000)
        out.write(b"\\n")
        out.flush()
    """)
    with pytest.raises(ProtocolError, match="nested too deeply"):
        converse(program, ScriptedEngine.from_replies([]), RunContext())


def test_event_data_nested_too_deeply_to_encode_is_cut() -> None:
    from jarvisd._events import EventType
    from jarvisd.bridge._events import vet_event
    from jarvisd.protocol import EventFrame

    deep: list[object] = []
    for _ in range(5000):
        deep = [deep]
    frame = EventFrame(type="tool_call_start", data={"tool": "t", "arguments": {"a": deep}})
    event = vet_event(frame, 0, {})
    assert event is not None and event.type is EventType.TOOL_CALL_START
    assert event.data["arguments"] == {"truncated": True}


@pytest.mark.timeout(30)
def test_a_budget_stop_anywhere_in_the_run_ends_the_program() -> None:
    # The program waits forever (its own clock allows a minute); a sibling in the same
    # run has its engine call refused by the ledger: the hard stop reaches the program.
    program = "import sys; sys.stdin.buffer.read()"
    run = RunContext(budget=Budget(max_calls=0))
    sibling = RunEngine.bind(ScriptedEngine.from_replies(["never"], latency_s=0.2), run.child())

    async def go() -> tuple[Outcome, BaseException | None]:
        request = ExecRequest(
            argv=[sys.executable, "-c", program], timeout=60.0, env={"PYTHONPATH": str(ROOT)}
        )
        channel = await SubprocessExecutor().open(request)
        session = FrameSession(channel, ScriptedEngine(), run)
        refused = asyncio.ensure_future(sibling.generate([Message.user("q")]))
        outcome = await session.run(Start(task="agent", payload={}))
        return outcome, refused.exception()

    outcome, refused = asyncio.run(go())
    assert isinstance(refused, BudgetExceeded)
    assert outcome.final is None and outcome.process.reason == "cancelled"


@pytest.mark.timeout(30)
def test_a_run_cancelled_while_its_program_ends_still_reaps_the_program() -> None:
    # The program gives its result, then lingers after its stdin closes; the run is
    # cancelled while the session waits for it to end: it is killed and reaped, not
    # left running with its pipes open.
    program = textwrap.dedent("""
        import sys, time
        from jarvisd.protocol import ResultFrame, encode
        sys.stdin.buffer.readline()
        sys.stdout.buffer.write(encode(ResultFrame(result={"answer": "done"})))
        sys.stdout.buffer.flush()
        time.sleep(60)
    """)

    async def go() -> Any:
        request = ExecRequest(
            argv=[sys.executable, "-c", program], timeout=60.0, env={"PYTHONPATH": str(ROOT)}
        )
        channel = await SubprocessExecutor().open(request)
        stdin_closed = asyncio.Event()
        close_stdin = channel.close_stdin

        async def closing() -> None:
            await close_stdin()
            stdin_closed.set()

        channel.close_stdin = closing  # type: ignore[method-assign]
        session = FrameSession(channel, ScriptedEngine(), RunContext())
        running = asyncio.ensure_future(session.run(Start(task="agent", payload={})))
        await stdin_closed.wait()  # the session now waits for the program's end
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        return channel

    channel = asyncio.run(go())
    assert channel.process.returncode is not None
    assert not channel.workdir.exists()
