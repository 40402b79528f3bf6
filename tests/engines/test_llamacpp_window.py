"""The embedded engine's context window follows what a request needs (issue 30, item
2): `jarvis ask` with a prompt past the default 4096 tokens is answered (the window
grows, up to what the model was trained for); past that, the error says what to
change. On SmolLM2-135M (trained for 8192 tokens), through the CLI."""

from __future__ import annotations

import pytest

from jarvisd.engines._window import grown_window, kv_bytes_per_token, requested_tokens
from tests.cli.test_cli import jarvis
from tests.conftest import link_real_models

pytestmark = pytest.mark.model

# About 1,000 tokens each: the filler a long prompt is made of.
FILLER = " ".join(f"Line {i}: the sky is blue and the grass is green." for i in range(80))


def test_a_prompt_past_the_default_window_is_answered() -> None:
    link_real_models("smollm2-135m")
    question = FILLER * 3 + FILLER[: len(FILLER) // 2] + "\nWhat colour is the sky? One word."
    out = jarvis("ask", "--engine", "llamacpp", "--model", "smollm2-135m", "--max-tokens", "8",
                 question, timeout=900)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() and "exceed context window" not in out.stderr


def test_a_prompt_past_the_models_own_limit_says_what_to_change() -> None:
    link_real_models("smollm2-135m")
    out = jarvis("ask", "--engine", "llamacpp", "--model", "smollm2-135m", FILLER * 10,
                 timeout=900)  # fmt: skip
    assert out.returncode != 0
    assert "engine.llamacpp.n_ctx" in out.stderr and "--tools" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_growth_is_bounded_by_training_and_memory() -> None:
    assert requested_tokens("Requested tokens (7341) exceed context window of 4096") == 7341
    assert requested_tokens("something else") is None
    per_token = kv_bytes_per_token({
        "general.architecture": "qwen2", "qwen2.block_count": "28",
        "qwen2.embedding_length": "1536", "qwen2.attention.head_count": "12",
        "qwen2.attention.head_count_kv": "2",
    })  # fmt: skip
    assert per_token == 2 * 28 * 2 * 128 * 2
    assert grown_window(4096, 7341 + 1024, 32768, per_token, 8 << 30) == 12288
    assert grown_window(4096, 40000, 32768, per_token, 8 << 30) is None  # past training
    assert grown_window(4096, 9000, 32768, per_token, 100 << 20) is None  # memory
