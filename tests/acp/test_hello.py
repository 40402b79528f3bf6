"""``jarvis acp`` answers ``initialize`` before the ACP SDK loads; the answer is the
one the SDK-side agent gives, and a bad command line is one line on stderr, exit 2."""

from __future__ import annotations

import asyncio
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
