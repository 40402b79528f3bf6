"""`retrieval` in a --sandbox run finds what memory holds (issue 30, item 9): the memory
database is on the host, so the host runs the tool for the agent in the container."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from jarvisd._messages import Generation, Message, ToolSpec
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.memory import MemoryStore
from jarvisd.runs import AgentSpec, run_spec

from .conftest import sandbox_config

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("engine")]


def test_retrieval_in_the_sandbox_finds_the_hosts_memory(roots: tuple[Path, Path]) -> None:
    store = MemoryStore()
    store.add("The otter's name is Juniper-19.")
    store.close()

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if messages[-1].role == "tool":
            return reply(f"Memory says: {messages[-1].content}")
        return reply("", ("retrieval", {"query": "otter name"}))

    engine = ScriptedEngine(fallback=answer)
    spec = AgentSpec(input="What is the otter's name?", agent="orchestrator",
                     tools=("retrieval",), isolation="sandbox")  # fmt: skip
    outcome = asyncio.run(run_spec(spec, RunContext(), sandbox_config(roots), engine))
    assert outcome.ok, outcome.failure
    assert "Juniper-19" in outcome.answer, outcome.answer
    assert any("Juniper-19" in r.content for r in outcome.tool_results)
