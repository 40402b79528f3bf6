"""Fuzz the agent side's message handling (``jarvis acp``'s wire and the SDK's router
behind it) with hypothesis: whatever a client sends, jarvis does not crash or hang,
every request gets exactly one reply with its id, every line that is not a message
(not JSON, not JSON-RPC 2.0, too long) gets an error reply, and the connection still
answers a good request afterwards."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jarvisd._config import Config
from jarvisd.acp import SessionStore, serve
from jarvisd.runs import AgentSpec

METHODS = ["initialize", "session/new", "session/load", "session/list", "session/prompt",
           "session/cancel", "session/set_mode", "session/set_config_option", "authenticate",
           "fs/read_text_file", "nope", "", "_ext"]  # fmt: skip
PROBE = {"jsonrpc": "2.0", "id": "probe", "method": "initialize", "params": {"protocolVersion": 1}}
MAX_LINE = 4096

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
ids = (
    st.none()
    | st.integers()
    | st.text(max_size=10)
    | st.floats(allow_nan=False)
    | st.lists(st.integers(), max_size=2)
)
messages = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "id": ids,
        "method": st.sampled_from(METHODS) | json_values,
        "params": json_values
        | st.fixed_dictionaries(
            {},
            optional={
                "sessionId": st.text(max_size=40),
                "cwd": st.sampled_from(["/tmp", "rel", ""]),
                "protocolVersion": json_values,
                "prompt": json_values,
                "modeId": json_values,
            },
        ),
        "result": json_values,
        "error": json_values,
    },
)
lines = st.one_of(
    messages.map(lambda m: json.dumps(m).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200).filter(lambda b: b"\n" not in b),
    st.integers(MAX_LINE + 1, 3 * MAX_LINE).map(lambda n: b"x" * n),
    st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),  # deep nesting
)


class Sink:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        return None


def exchange(lines_in: list[bytes], root: Path) -> list[dict[str, Any]]:
    """Feed lines to a fresh agent, then EOF; its replies (serve must end by itself)."""

    async def main() -> list[dict[str, Any]]:
        reader = asyncio.StreamReader(limit=MAX_LINE)
        for line in lines_in:
            reader.feed_data(line + b"\n")
        reader.feed_eof()
        sink = Sink()
        await asyncio.wait_for(
            serve(
                AgentSpec(input=""),
                Config(),
                reader,
                sink,
                store=SessionStore(root),
                max_line=MAX_LINE,
            ),  # type: ignore[arg-type]
            30,
        )
        return [json.loads(line) for line in bytes(sink.data).splitlines()]

    return asyncio.run(main())


def expectation(line: bytes) -> str:
    """What one line must get: "reply" (to its id), "error" (id null or its id) or
    "none" (a notification, a response to nothing, a blank line)."""
    if not line.strip():
        return "none"
    if len(line) > MAX_LINE:
        return "error"
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return "error"
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return "error"
    has_id = "id" in message
    raw_id = message.get("id")
    good_id = raw_id is None or (isinstance(raw_id, str | int) and not isinstance(raw_id, bool))
    if isinstance(raw_id, str) and len(raw_id) > 200:
        good_id = False
    if has_id and not good_id:
        return "error"
    if "method" in message:
        method, params = message["method"], message.get("params")
        if (
            not isinstance(method, str)
            or not method
            or (params is not None and not isinstance(params, dict | list))
        ):
            return "error"
        return "reply" if has_id else "none"
    if raw_id is None or ("result" in message) == ("error" in message):
        return "error"
    return "none"  # a response to a request never made: dropped


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(line=lines)
def test_every_bad_message_gets_an_error_reply(line: bytes, tmp_path: Path) -> None:
    replies = exchange([line, json.dumps(PROBE).encode()], tmp_path)
    for reply in replies:
        assert reply.get("jsonrpc") == "2.0" and "id" in reply
        assert ("result" in reply) != ("error" in reply)
        if "error" in reply:
            assert isinstance(reply["error"]["code"], int) and isinstance(
                reply["error"]["message"], str
            )
    probe = [r for r in replies if r["id"] == "probe"]
    assert len(probe) == 1 and "result" in probe[0], replies  # the connection survived
    others = [r for r in replies if r["id"] != "probe"]
    expected = expectation(line)
    if expected == "none":
        assert others == []
    elif expected == "error":
        assert len(others) == 1 and "error" in others[0], (line[:200], others)
    else:
        message = json.loads(line)
        assert len(others) == 1 and others[0]["id"] == message["id"], (line[:200], others)


def test_a_line_too_long_is_refused_and_the_next_one_read(tmp_path: Path) -> None:
    replies = exchange(
        [
            b'{"jsonrpc": "2.0", "id": 7, "method": "' + b"a" * 10 * MAX_LINE + b'"}',
            json.dumps(PROBE).encode(),
        ],
        tmp_path,
    )
    assert replies[0] == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": f"a message is at most {MAX_LINE} bytes"},
    }
    assert replies[1]["id"] == "probe" and "result" in replies[1]
