"""An MCP server's tool called by the orchestrator on a real local model
(Qwen2.5-Coder-0.5B, llama.cpp, temperature 0): the structure is asserted, a tool call
the model wrote reaching the server and its result coming back."""

from __future__ import annotations

import asyncio

import pytest

from jarvisd._runcontext import RunContext
from jarvisd.runs import AgentSpec, run_spec
from tests.conftest import real_model_path
from tests.mcp.test_mcp import demo_config, demo_servers

# Two short turns, but on a shared machine a 0.5B model's prompt with tool schemas can
# take minutes to read: the default 300 s test timeout is not a speed target here.
pytestmark = [pytest.mark.model, pytest.mark.timeout(1200)]


def test_the_orchestrator_on_a_real_model_calls_a_server_tool() -> None:
    from jarvisd.engines import LlamaCppEngine

    engine = LlamaCppEngine(str(real_model_path("qwen2.5-coder-0.5b")), n_ctx=4096)
    spec = AgentSpec(
        "Use the demo.add tool to add 1234 and 5678.",
        agent="orchestrator",
        tools=("demo.add",),
        temperature=0,
        max_tokens=128,
        max_turns=2,
    )

    async def go() -> object:
        try:
            return await run_spec(spec, RunContext(), demo_config(), engine)
        finally:
            await engine.aclose()

    outcome = asyncio.run(go())
    calls = [r for r in outcome.tool_results if r.tool_name == "demo.add"]  # type: ignore[attr-defined]
    assert calls, outcome
    assert calls[0].success and calls[0].content == "6912", calls[0]
    assert demo_servers() == []
