"""The embedded engine keeps a conversation's prompt cache while another conversation
takes a turn (``engines/_prefixstates``): an agent's turns between sub-calls, a title
request, two tasks on one model. Counted in prompt tokens the model reads, not seconds.
And it reads prompts with flash attention (faster on the CPU for long prompts)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jarvisd import Message, SamplingOptions
from jarvisd._config import parse_config
from jarvisd.engines import LlamaCppEngine, build_engine
from tests.conftest import real_model_path

pytestmark = pytest.mark.model

GREEDY = SamplingOptions(temperature=0, max_tokens=16)
RULES = "You are a careful assistant. " + " ".join(
    f"Rule {i}: answer briefly and cite rule {i}." for i in range(40)
)  # some 560 tokens: an agent's system prompt and tools


def _counting(engine: LlamaCppEngine) -> list[int]:
    """Prompt and reply tokens the loaded model reads, one entry per call."""
    llama: Any = engine.load()
    real_eval = llama.eval
    read: list[int] = []

    def eval(tokens: Any) -> Any:
        read[-1] += len(tokens)
        return real_eval(tokens)

    llama.eval = eval
    return read


def test_a_conversation_between_two_turns_of_another_is_not_read_again() -> None:
    engine = LlamaCppEngine(str(real_model_path("smollm2-135m")), n_ctx=4096)
    read = _counting(engine)
    first = [Message.system(RULES), Message.user("What is rule 7?")]
    other = [Message.user("Summarise: " + "the cat sat on the mat. " * 40)]

    async def go() -> tuple[list[Message], str, int]:
        read.append(0)
        answer = (await engine.generate(first, options=GREEDY)).content
        read.append(0)
        await engine.generate(other, options=GREEDY)
        read.append(0)
        second = [*first, Message.assistant(answer), Message.user("And rule 9?")]
        reply = await engine.generate(second, options=GREEDY)
        return second, reply.content, reply.usage.prompt_tokens

    try:
        second, content, prompt = asyncio.run(go())
    finally:
        asyncio.run(engine.aclose())
    assert read[0] > 500 and read[1] > 250, read
    # The second turn reads what the first did not hold (its answer, the new question
    # and the reply), not the 560 tokens of rules again.
    assert read[2] < 100 < prompt, (read, prompt)

    # And it answers as a model that reads the whole prompt afresh (temperature 0).
    cold = LlamaCppEngine(str(real_model_path("smollm2-135m")), n_ctx=4096)

    async def afresh() -> str:
        try:
            return (await cold.generate(second, options=GREEDY)).content
        finally:
            await cold.aclose()

    assert asyncio.run(afresh()) == content


def test_the_configured_embedded_engine_reads_prompts_with_flash_attention() -> None:
    import llama_cpp

    path = str(real_model_path("smollm2-135m"))
    engine = build_engine("llamacpp", parse_config({"engine": {"llamacpp": {"model": path}}}))
    assert isinstance(engine, LlamaCppEngine)
    try:
        llama: Any = engine.load()
        assert llama.context_params.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    finally:
        asyncio.run(engine.aclose())
