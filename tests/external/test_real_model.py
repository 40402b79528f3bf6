"""opencode on a real local model (Qwen2.5-Coder-1.5B, llama.cpp, temperature 0),
sandboxed, through the gateway: it reads a file of a small project with its own tool,
and its answer holds that file's marker string.

opencode is held to its ``read`` tool (``--tools read``): with all ten of its tools the
first prompt is ~8,000 tokens, more than seven minutes of prompt processing for a
1.5B model on two cores; with one it is ~2,700."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from jarvisd._config import parse_config
from jarvisd._messages import Generation, Message, SamplingOptions, ToolSpec
from jarvisd._runcontext import RunContext
from jarvisd.engines import WrapperEngine
from jarvisd.engines._base import DEFAULT_OPTIONS
from jarvisd.runs import AgentSpec, run_spec
from tests.conftest import real_model_path

from .test_real_agents import IMAGE, _ready, real_agents_dir  # noqa: F401 - fixture

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(1200)]

MODEL = "qwen2.5-coder-1.5b"
MARKER = "silver-otter-58"


class AtZero(WrapperEngine):
    """Temperature 0 whatever the agent asks (it sets its own)."""

    async def generate(
        self, messages: Sequence[Message], *, model: str = "", tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:  # fmt: skip
        options = dataclasses.replace(options, temperature=0.0)
        return await super().generate(messages, model=model, tools=tools, options=options)

    async def stream(  # type: ignore[override]
        self, messages: Sequence[Message], *, model: str = "", tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Any:  # fmt: skip
        options = dataclasses.replace(options, temperature=0.0)
        async for chunk in super().stream(messages, model=model, tools=tools, options=options):
            yield chunk


def test_opencode_reads_a_file_and_answers_with_its_marker(tmp_path: Path) -> None:
    from jarvisd.engines import LlamaCppEngine

    _ready("opencode")
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text('from config import NAME\n\nprint("hello", NAME)\n')
    # The marker on the first line: the model may read part of a file (in one CI run its
    # read returned the first line only).
    (project / "config.py").write_text(f'NAME = "demo"  # release marker: {MARKER}\n')
    (project / "README.md").write_text("A tiny demo project.\n")
    os.chmod(project, 0o777)
    config = parse_config({
        "sandbox": {"image": IMAGE, "allowed_roots": [f"{tmp_path}:rw"], "memory": "2g"},
    })  # fmt: skip
    engine = AtZero(LlamaCppEngine(str(real_model_path(MODEL)), n_ctx=16384))
    spec = AgentSpec(
        input=f"Read the file {project}/config.py with your read tool and tell me the "
        "release marker string written in it.",
        agent="opencode", tools=("read",), temperature=0, max_tokens=256,
        options={"workspace": str(project)}, max_wall=900,
    )  # fmt: skip

    async def go() -> Any:
        try:
            return await run_spec(spec, RunContext(), config, engine, trace=False)
        finally:
            await engine.aclose()

    outcome = asyncio.run(go())
    assert outcome.ok, outcome.failure
    assert any(MARKER in r.content for r in outcome.tool_results), outcome.tool_results
    assert MARKER in outcome.answer, outcome.answer
