"""jarvis code on a real local model (Qwen2.5-Coder-1.5B, llama.cpp, temperature 0):
native_openhands on a one-line bug gives a diff or a clear "no change" outcome. The
structure is asserted, never the model's prose."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from jarvisd._config import Config, SandboxConfig
from jarvisd._paths import paths
from jarvisd._run import RunContext
from jarvisd.cli._code import _render
from jarvisd.code import CodeStore, prepare
from jarvisd.runs import AgentSpec, run_spec
from tests.conftest import real_model_path, require
from tests.sandbox.conftest import engine_problem

from .test_run import TEST_COMMAND

pytestmark = [pytest.mark.model, pytest.mark.docker]


def test_native_openhands_fixes_a_one_line_bug_or_says_no_change(project: Path) -> None:
    from jarvisd.engines import LlamaCppEngine

    problem = engine_problem()
    require(not problem, problem)
    engine: Any = LlamaCppEngine(str(real_model_path("qwen2.5-coder-1.5b")), n_ctx=4096)
    store = CodeStore(paths().state / "code.db")
    ws = prepare(str(project), store=store, state_dir=paths().state, task="fix add",
                 agent="native_openhands", test=TEST_COMMAND)  # fmt: skip
    spec = AgentSpec(
        input="The function add in calc.py returns a - b instead of a + b. Fix that line.",
        agent="native_openhands", temperature=0.0, max_tokens=400, max_turns=4,
        workspace=ws.id,
    )  # fmt: skip

    async def go() -> Any:
        try:
            return await run_spec(spec, RunContext(), Config(sandbox=SandboxConfig()), engine)
        finally:
            await engine.aclose()

    outcome = asyncio.run(go())
    assert outcome.failure is None or outcome.failure.code == "no_answer", outcome.failure
    record = store.get(ws.id)
    assert record.state in ("done", "failed")
    out = record.outcome
    assert out["test_before"]["passed"] is False
    code = outcome.metadata["code"]
    assert code["workspace"] == ws.id
    text = "\n".join(_render(record, diff=True, color=False))
    after = out["test_after"]
    print(f"\n1.5B: {record.state}, changed {out['changed']}, files {out['files']}, "
          f"test after {None if after is None else after['passed']}\n{out['diff'][:600]}")  # fmt: skip
    if out["changed"]:
        assert out["diff"].startswith("diff --git a/") and out["files"]
        assert code["files"] == out["files"]
    else:
        assert out["files"] == [] and out["diff"] == "" and "no change" in text
