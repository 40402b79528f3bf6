"""The embedded engine on a real model (tier 2)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from jarvisd import Message, RunContext, SamplingOptions
from jarvisd.engines import LlamaCppEngine, RunEngine
from jarvisd.engines._llamacpp import LlamaCppPool
from tests.conftest import link_real_models, real_model_path

pytestmark = pytest.mark.model

GREEDY = SamplingOptions(temperature=0, max_tokens=32)


def test_generate_and_stream_agree() -> None:
    engine = LlamaCppEngine(str(real_model_path("smollm2-135m")), n_ctx=2048)

    async def go() -> None:
        whole = await engine.generate([Message.user("Name three primary colors.")], options=GREEDY)
        assert (
            whole.content.strip()
            and whole.usage.completion_tokens > 0
            and whole.usage.prompt_tokens > 0
        )
        chunks = [
            c
            async for c in engine.stream(
                [Message.user("Name three primary colors.")], options=GREEDY
            )
        ]
        assert chunks[-1].done and chunks[-1].generation is not None
        assert "".join(c.delta for c in chunks) == whole.content == chunks[-1].generation.content
        assert await engine.context_length() == 2048
        await engine.aclose()

    asyncio.run(go())


def test_cancel_stops_generation_within_a_few_tokens() -> None:
    engine = LlamaCppEngine(str(real_model_path("smollm2-135m")), n_ctx=2048)
    run = RunContext()
    # Each generation's pieces, as the model's thread emits them: what is counted is
    # tokens made after the cancel, not seconds (the machine may be loaded).
    calls: list[list[str]] = []
    real_run = engine._run

    def counting_run(messages: Any, tools: Any, options: Any, emit: Any, stop: Any) -> Any:
        pieces: list[str] = []
        calls.append(pieces)

        def counted(text: str) -> None:
            pieces.append(text)
            emit(text)

        return real_run(messages, tools, options, counted, stop)

    engine._run = counting_run  # type: ignore[method-assign]

    async def go() -> tuple[int, int]:
        guarded = RunEngine(engine, run)
        task = asyncio.create_task(
            guarded.generate(
                [Message.user("Write a very long story.")], options=SamplingOptions(max_tokens=2000)
            )
        )
        while not calls or len(calls[0]) < 8:
            assert not task.done(), task
            await asyncio.sleep(0.01)
        at_cancel = len(calls[0])
        run.cancel.cancel("test")
        with pytest.raises(Exception) as info:
            await task
        assert type(info.value).__name__ == "Cancelled"
        # The engine is free again: a new request runs, so the cancelled thread has left
        # the model (the two never share it) and its count is final.
        again = await engine.generate([Message.user("Hi")], options=SamplingOptions(max_tokens=4))
        assert again.usage.completion_tokens >= 1
        await engine.aclose()
        return at_cancel, len(calls[0])

    at_cancel, made = asyncio.run(go())
    # The thread checks its stop flag at every token: only those already on their way
    # when the cancel reached the event loop can follow (2000 were asked for).
    assert made - at_cancel <= 20, (at_cancel, made)


def test_pool_refuses_unknown_model() -> None:
    pool = LlamaCppPool([str(real_model_path("smollm2-135m"))])

    async def go() -> None:
        with pytest.raises(Exception, match="not found"):
            await pool.generate([Message.user("x")], model="other")
        await pool.aclose()

    asyncio.run(go())


def test_jarvis_ask_embedded_named_model() -> None:
    link_real_models("smollm2-135m")
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-m", "jarvisd", "ask", "--json", "--temperature", "0", "--max-tokens", "30",
         "--model", "smollm2-135m", "Name three primary colors."],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["engine"] == "llamacpp" and data["model"] == "smollm2-135m"
    assert data["answer"].strip() and data["usage"]["completion_tokens"] > 0


def test_jarvis_ask_with_no_configured_model_uses_the_strongest_and_answers_paris() -> None:
    # The default engine (no Ollama answers here) and no model in any config.
    link_real_models("qwen2.5-coder-1.5b")
    out = subprocess.run(
        [sys.executable, "-m", "jarvisd", "ask", "--json", "--temperature", "0",
         "What is the capital of France? Answer with one word."],
        capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["engine"] == "llamacpp" and data["model"] == "qwen2.5-coder-1.5b"
    assert "paris" in data["answer"].lower(), data["answer"]


def test_text_held_back_for_a_possible_tool_call_is_streamed_when_none_comes() -> None:
    from jarvisd import ToolSpec

    engine = LlamaCppEngine(str(real_model_path("smollm2-135m")), n_ctx=2048)
    tool = ToolSpec("calculator", "Evaluate arithmetic.", {"type": "object", "properties": {}})
    question = [Message.user('Reply with exactly this JSON: {"a": 1, "b": [2, 3]}')]

    async def go() -> None:
        chunks = [c async for c in engine.stream(question, tools=[tool], options=GREEDY)]
        final = chunks[-1].generation
        assert final is not None and not final.tool_calls
        assert "{" in final.content  # the held-back path ran
        assert "".join(c.delta for c in chunks) == final.content
        await engine.aclose()

    asyncio.run(go())
