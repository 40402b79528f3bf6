"""Tier 2: stopping at the first complete tool call, on a real model.

Qwen2.5-Coder-0.5B, asked a calculator question, writes its call and then the same
call again and again until max_tokens. The same run is made twice on the same model
at temperature 0: once as jarvis runs it, once with generation left to run on after
the call (the engine never sees ``stop_when``, as before this change). The turns' tokens
generated must fall by at least half, and the answer must still be right.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from jarvisd._messages import Generation, Message, SamplingOptions, ToolSpec
from jarvisd.agents import AgentRegistry
from jarvisd.engines import WrapperEngine
from jarvisd.tools import CalculatorTool
from tests.conftest import real_model_path

pytestmark = pytest.mark.model

_DEFAULT = SamplingOptions()
QUESTION = "Use the calculator tool to compute 1234 * 5678, then add 4321."
ANSWER = "7010973"


class Generated(WrapperEngine):
    """Counts the tokens generated; with ``run_on``, hides ``stop_when`` from the
    engine, so that it generates as it did before generation stopped at the call."""

    def __init__(self, inner: Any, *, run_on: bool) -> None:
        super().__init__(inner)
        self.run_on = run_on
        self.tokens: list[int] = []

    async def generate(
        self, messages: Sequence[Message], *, model: str = "", tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = _DEFAULT,
    ) -> Generation:  # fmt: skip
        if self.run_on:
            options = dataclasses.replace(options, stop_when=None)
        generation = await super().generate(messages, model=model, tools=tools, options=options)
        self.tokens.append(generation.usage.completion_tokens)
        return generation


def run(*, run_on: bool) -> tuple[Any, Generated]:
    from jarvisd.engines import LlamaCppEngine

    path = str(real_model_path("qwen2.5-coder-0.5b"))
    engine = Generated(LlamaCppEngine(path, n_ctx=4096), run_on=run_on)
    agent = AgentRegistry.create(
        "orchestrator", engine, path, tools=[CalculatorTool()], temperature=0,
        max_tokens=512, max_turns=6,
    )  # fmt: skip

    async def go() -> Any:
        try:
            return await agent.arun(QUESTION)
        finally:
            await engine.aclose()

    return asyncio.run(go()), engine


def test_repeated_calls_are_never_generated() -> None:
    before_result, before = run(run_on=True)
    after_result, after = run(run_on=False)
    print("tokens per turn, running on:", before.tokens, "stopping:", after.tokens)
    assert max(before.tokens) >= 200, f"the model did not repeat its call: {before.tokens}"
    assert sum(after.tokens) <= sum(before.tokens) / 2, (before.tokens, after.tokens)
    assert ANSWER in after_result.content.replace(",", ""), after_result.content
    assert before_result.tool_results  # both runs called the tool
