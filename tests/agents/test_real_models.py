"""The agents on a real local model (Qwen2.5-Coder-0.5B, llama.cpp, temperature 0).

A 0.5B model's answers are not asserted exactly: these tests assert the structure (a
tool call was made from what the model wrote, REPL steps ran, sub-calls happened, the
run ended through FINAL). Exact answers are asserted with scripted engines elsewhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import pytest

from jarvisd._messages import Generation, Message, SamplingOptions, ToolSpec
from jarvisd.agents import AgentContext, AgentRegistry
from jarvisd.engines import WrapperEngine
from jarvisd.executors import SubprocessExecutor
from jarvisd.tools import CalculatorTool
from tests.conftest import real_model_path

pytestmark = pytest.mark.model

MODEL = "qwen2.5-coder-0.5b"
_DEFAULT_OPTIONS = SamplingOptions()


class Counting(WrapperEngine):
    """Counts root calls (with a system prompt) and sub-calls (without)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.root = 0
        self.sub = 0

    async def generate(
        self, messages: Sequence[Message], *, model: str = "", tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = _DEFAULT_OPTIONS,
    ) -> Generation:  # fmt: skip
        if messages and messages[0].role.value == "system":
            self.root += 1
        else:
            self.sub += 1
        return await super().generate(messages, model=model, tools=tools, options=options)


def engine(n_ctx: int = 4096, model: str = MODEL) -> Any:
    from jarvisd.engines import LlamaCppEngine

    return LlamaCppEngine(str(real_model_path(model)), n_ctx=n_ctx)


def run(agent: Any, text: str, context: AgentContext | None = None) -> Any:
    async def go() -> Any:
        try:
            return await agent.arun(text, context)
        finally:
            await agent.engine.aclose()

    return asyncio.run(go())


def test_orchestrator_uses_the_calculator() -> None:
    agent = AgentRegistry.create(
        "orchestrator",
        engine(),
        tools=[CalculatorTool()],
        temperature=0,
        max_tokens=256,
        max_turns=4,
    )
    result = run(agent, "Use the calculator tool to compute 1234 * 5678.")
    calls = [r for r in result.tool_results if r.tool_name == "calculator"]
    assert calls, result
    assert calls[0].success and calls[0].content == "7006652", calls[0]
    # The number itself is right when the model quotes the tool's result.
    assert "7006652" in result.content.replace(",", ""), result.content


def test_native_react_action_lines_become_a_tool_call() -> None:
    agent = AgentRegistry.create(
        "native_react",
        engine(),
        tools=[CalculatorTool()],
        temperature=0,
        max_tokens=200,
        max_turns=3,
    )
    result = run(agent, "What is 37 * 43?")
    assert result.tool_results, result
    first = result.tool_results[0]
    assert first.tool_name == "calculator" and first.success, first
    assert first.content == "1591"


def test_rlm_reads_a_context_larger_than_the_window_through_sub_calls() -> None:
    # The 0.5B model cannot follow the RLM protocol at all (it answers without code);
    # the 1.5B model writes the chunking code and ends through FINAL.
    lines = [
        f"Record {i}: the weather was mild and nothing happened on day {i}." for i in range(200)
    ]
    lines[137] = "Record 137: the vault password is TANGERINE-42."
    context = "\n".join(lines)  # about 12.5k characters, ~3.5k tokens: 3.5x the 1024 window
    counting = Counting(engine(n_ctx=1024, model="qwen2.5-coder-1.5b"))
    agent = AgentRegistry.create(
        "rlm", counting, temperature=0, max_tokens=300, max_turns=6, executor=SubprocessExecutor(),
        sub_temperature=0, sub_max_tokens=64, exec_timeout=600,
    )  # fmt: skip
    result = run(agent, "What is the vault password?", AgentContext(metadata={"context": context}))
    steps = [r for r in result.tool_results if r.tool_name == "repl"]
    assert steps, result
    assert counting.sub >= 1, f"no llm_query sub-calls; steps: {[s.content[:200] for s in steps]}"
    assert result.metadata.get("final_from_tool") is True, json.dumps(result.to_dict())[:2000]


class Uncut(WrapperEngine):
    """Records the tokens each turn generated; ``cut=False`` is the engine as it was
    before generation stopped at the first complete tool call (``stop_when`` unset)."""

    def __init__(self, inner: Any, *, cut: bool) -> None:
        super().__init__(inner)
        self.cut = cut
        self.turns: list[int] = []

    def _options(self, options: SamplingOptions) -> SamplingOptions:
        return options if self.cut else dataclasses.replace(options, stop_when=None)

    async def generate(
        self, messages: Sequence[Message], *, model: str = "", tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = _DEFAULT_OPTIONS,
    ) -> Generation:  # fmt: skip
        reply = await super().generate(
            messages, model=model, tools=tools, options=self._options(options)
        )
        self.turns.append(reply.usage.completion_tokens)
        return reply

    async def stream(  # type: ignore[override]
        self, messages: Sequence[Message], *, model: str = "", tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = _DEFAULT_OPTIONS,
    ) -> Any:  # fmt: skip
        async for chunk in super().stream(
            messages, model=model, tools=tools, options=self._options(options)
        ):
            if chunk.done and chunk.generation is not None:
                self.turns.append(chunk.generation.usage.completion_tokens)
            yield chunk


@pytest.mark.slow
def test_stopping_at_the_call_halves_a_turn_the_model_filled_with_repeats() -> None:
    # On this question 0.5B's second reply, uncut, is the call written again and again
    # to the 512-token limit; cut at the first complete call, it is one call.
    inner = engine()

    async def turns(cut: bool) -> tuple[list[int], Any]:
        counted = Uncut(inner, cut=cut)
        agent = AgentRegistry.create(
            "orchestrator", counted, tools=[CalculatorTool()], temperature=0, max_tokens=512,
            max_turns=4,
        )  # fmt: skip
        return counted.turns, await agent.arun("What is 17.5% of 86420?")

    async def go() -> tuple[tuple[list[int], Any], tuple[list[int], Any]]:
        try:
            return await turns(cut=False), await turns(cut=True)
        finally:
            await inner.aclose()

    (before, _), (after, result) = asyncio.run(go())
    repeated = max(range(len(before)), key=before.__getitem__)
    assert before[repeated] >= 256, before  # the uncut turn did run on with repeats
    assert len(after) > repeated and 2 * after[repeated] <= before[repeated], (before, after)
    assert 2 * sum(after) <= sum(before), (before, after)
    assert "15123.5" in result.content.replace(",", ""), result.content
