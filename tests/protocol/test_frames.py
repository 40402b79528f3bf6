from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jarvisd.protocol import (
    SENTINEL,
    Approval,
    Approve,
    Cancel,
    ErrorFrame,
    EventFrame,
    FrameError,
    FrameReader,
    Infer,
    InferResult,
    Log,
    Ping,
    Pong,
    ResultFrame,
    Start,
    ToolFrame,
    ToolResultFrame,
    decode_line,
    encode,
)

FRAMES = [
    Start(task="agent", payload={"spec": {"input": "hi\nthere"}, "secret": "s3cr3t"}),
    Infer(request={"messages": [{"role": "user", "content": "é ✓ \u2028"}]}),
    InferResult(generation={"content": "ok"}),
    InferResult(error="engine down"),
    ToolFrame(tool="demo.add", arguments={"a": 2, "b": 40}),
    ToolResultFrame(content="42", success=True),
    Cancel(reason="user"),
    EventFrame(type="tool_call_start", data={"tool": "calculator"}),
    ResultFrame(result={"content": "42", "turns": 2}),
    ErrorFrame(code="timeout", message="took too long"),
    Log(level="warning", message="careful"),
    Approve(tool="write out.txt", tool_kind="edit", arguments={"path": "out.txt"}),
    Approval(allowed=True, reason="approved by the user"),
    Ping(),
    Pong(),
]


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: f.kind)
def test_round_trip(frame: object) -> None:
    line = encode(frame)  # type: ignore[arg-type]
    assert line.startswith(SENTINEL.encode()) and line.endswith(b"\n")
    assert line.count(b"\n") == 1 and line.isascii()  # never a raw newline inside
    assert decode_line(line) == frame


def test_reader_separates_noise_from_frames() -> None:
    stream = io.BytesIO(
        b"warming up...\n" + encode(Ping(id="a")) + b"\xff\xfe binary junk\n" + encode(Pong(id="b"))
    )
    reader = FrameReader(stream)
    assert [f.id for f in reader] == ["a", "b"]
    assert reader.noise[0] == "warming up..." and len(reader.noise) == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (SENTINEL + "{not json", "not valid JSON"),
        (SENTINEL + "[1, 2]", "must be a JSON object"),
        (SENTINEL + json.dumps({"kind": "launch_missiles", "id": "x"}), "unknown frame kind"),
        (SENTINEL + json.dumps({"kind": "ping"}), "non-empty string id"),
        (SENTINEL + json.dumps({"kind": "start", "id": "x", "payload": [1]}), "must be an object"),
        ("@@jarvis:2@@ {}", "version '2' is not supported"),
        (
            SENTINEL + json.dumps({"kind": "approval", "id": "x", "allowed": "yes"}),
            "approval.allowed must be true or false",
        ),
        (
            SENTINEL + json.dumps({"kind": "approve", "id": "x", "tool": ["a"]}),
            "'tool' must be a string",
        ),
        (SENTINEL + '{"kind": "event", "id": "x", "data": ' + "[" * 100_000, "nested too deeply"),
        # A tool call's arguments are an object: never a list, nor a falsy stand-in.
        (
            SENTINEL + json.dumps({"kind": "tool", "id": "x", "tool": "t", "arguments": [1]}),
            "tool.arguments must be an object",
        ),
        (
            SENTINEL + json.dumps({"kind": "tool", "id": "x", "tool": "t", "arguments": ""}),
            "tool.arguments must be an object",
        ),
        (
            SENTINEL + json.dumps({"kind": "tool_result", "id": "x", "content": "c"}),
            "tool_result.success must be true or false",
        ),
    ],
)
def test_malformed_frames_are_refused_clearly(line: str, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        decode_line(line)


def test_oversized_frames_are_refused() -> None:
    big = encode(Start(payload={"blob": "x" * 5000}))
    with pytest.raises(FrameError, match="exceeds"):
        decode_line(big, max_bytes=1000)
    with pytest.raises(FrameError, match="exceeds"):
        FrameReader(io.BytesIO(big), max_bytes=1000).read()


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(lambda t: SENTINEL + t)))
def test_fuzz_decode_only_raises_frame_error(data: bytes | str) -> None:
    try:
        decode_line(data)
    except FrameError:
        pass
