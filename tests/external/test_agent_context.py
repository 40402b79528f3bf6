"""An external agent's engine is sized for it before it starts (issue 30, item 2: "size
it for the agent kind"): opencode's and codex's first prompts (7,341 and 8,397 tokens)
do not fit the embedded engine's default 4096. Built-in agents declare the window they
need, a configured one may (``context``); on the real embedded engine, SmolLM2-135M,
trained for 8192 tokens, so the window stops there."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from jarvisd._config import parse_config
from jarvisd._runcontext import RunContext
from jarvisd.external._registry import BUILTIN
from jarvisd.runs import AgentSpec, run_spec
from tests.conftest import real_model_path


def test_opencode_and_codex_declare_more_than_their_first_prompt() -> None:
    assert BUILTIN["opencode"].context >= 7341 + 4096
    assert BUILTIN["codex"].context >= 8397 + 4096


@pytest.mark.model
@pytest.mark.parametrize("context", [0, 6000])
def test_the_engine_is_sized_for_the_agent_before_it_starts(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, context: int
) -> None:
    from jarvisd.engines import LlamaCppEngine

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    command = [sys.executable, "-m", "jarvisd.testing.acp_agent", "work"]
    config = parse_config({
        "agents": {"external": {"fake": {"command": command, "context": context}}},
        "sandbox": {"allowed_roots": [f"{workspace.parent}:rw"]},
    })  # fmt: skip
    engine = LlamaCppEngine(str(real_model_path("smollm2-135m")), n_ctx=4096)
    spec = AgentSpec(input="go", agent="fake", isolation="host",
                     options={"workspace": str(workspace)})  # fmt: skip

    async def go() -> object:
        try:
            return await run_spec(spec, RunContext(), config, engine, trace=False)
        finally:
            await engine.aclose()

    outcome = asyncio.run(go())
    assert outcome.ok, outcome.failure  # type: ignore[attr-defined]
    # The scripted agent makes no inference call: only the reservation can grow it,
    # to 8192 (a step of 4096 above 6000, within what the model was trained for).
    assert engine.n_ctx == (8192 if context else 4096)


def test_a_configured_context_is_checked() -> None:
    from jarvisd._errors import ConfigError

    with pytest.raises(ConfigError):
        parse_config({"agents": {"external": {"x": {"command": ["x"], "context": -1}}}})
