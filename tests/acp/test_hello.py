"""``jarvis acp`` answers ``initialize`` before the ACP SDK loads; the answer is the
one the SDK-side agent gives, and a bad command line is one line on stderr, exit 2."""

from __future__ import annotations

import asyncio
import json
import subprocess

import acp

from jarvisd._config import Config
from jarvisd.acp import JarvisAcpAgent, SessionStore
from jarvisd.acp._hello import PROTOCOL_VERSION, initialize_reply
from jarvisd.runs import AgentSpec

from ._client import JARVIS, env

INIT = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n'


def test_the_early_answer_is_the_agents_answer(tmp_path: object) -> None:
    assert PROTOCOL_VERSION == acp.PROTOCOL_VERSION
    agent = JarvisAcpAgent(AgentSpec(input=""), Config(), SessionStore())
    answer = asyncio.run(agent.initialize(protocol_version=7))
    # As the SDK puts it on the wire (acp.connection: exclude_none, exclude_unset).
    dumped = answer.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)
    assert dumped == initialize_reply({"protocolVersion": 7})
    assert initialize_reply({"protocolVersion": "1"}) is None  # left to the SDK's checks


def test_a_bad_command_line_is_one_line_and_exit_2() -> None:
    done = subprocess.run(
        [*JARVIS, "acp", "--agent", "nosuch"],
        input=INIT,
        capture_output=True,
        env=env(),
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.decode().strip().splitlines() == [
        done.stderr.decode().strip().splitlines()[-1]
    ]
    assert done.stderr.startswith(b"jarvis: error: unknown agent 'nosuch'")
    assert b'"protocolVersion":1' in done.stdout  # answered before the spec was checked


def test_a_bad_first_line_is_left_to_the_wire() -> None:
    """The early answer takes only a plain initialize: anything else first goes to the
    bounded wire, which answers it, and the initialize after it still gets its answer."""
    lines = b"not json\n" + b'{"jsonrpc":"2.0","id":"x","method":"initialize","params":[]}\n' + INIT
    done = subprocess.run(
        [*JARVIS, "acp"], input=lines, capture_output=True, env=env(), timeout=120
    )
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert replies[0] == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "parse error: not JSON"},
    }
    by_id = {r["id"]: r for r in replies[1:]}
    assert by_id["x"]["error"]["code"] == -32602  # the SDK's invalid params
    assert by_id[0]["result"]["protocolVersion"] == 1
