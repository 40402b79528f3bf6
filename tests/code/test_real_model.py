"""jarvis code on a real local model (Qwen2.5-Coder-1.5B, llama.cpp, temperature 0):
native_openhands fixes a one-line bug, as a user would call it fixed: the run succeeds,
the workspace's diff changes calc.py, and the project's test passes after. The structure
is asserted, never the model's prose."""

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


def test_native_openhands_fixes_a_one_line_bug(project: Path) -> None:
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
    assert outcome.failure is None, outcome.failure
    record = store.get(ws.id)
    out = record.outcome
    after = out["test_after"]
    text = "\n".join(_render(record, diff=True, color=False))
    print(f"\n1.5B: {record.state}, changed {out['changed']}, files {out['files']}, "
          f"test after {None if after is None else after['passed']}\n{out['diff'][:600]}")  # fmt: skip
    assert out["test_before"]["passed"] is False
    code = outcome.metadata["code"]
    assert code["workspace"] == ws.id
    # What a user calls fixed: the file changed, the test that failed now passes.
    assert record.state == "done", text
    assert out["changed"] and out["files"] == ["calc.py"], text
    assert out["diff"].startswith("diff --git a/calc.py") and "a + b" in out["diff"]
    assert after is not None and after["passed"] is True, text
    assert code["files"] == out["files"]
