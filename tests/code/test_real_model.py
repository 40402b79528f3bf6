"""jarvis code on a real local model (Qwen2.5-Coder-1.5B, llama.cpp, temperature 0):
what it checks is that the outcome is reported truthfully, not that the model fixes the
bug. At 9d73508, 1.5B answers in prose and runs no cell ("I changed the line `return
a - b` to `return a + b`"): nothing changes, and jarvis must say so (no change, the test
still failing, the run failed with no_change after one re-ask to act), never present
the claim as a fix. A test that asserted the fix would
fail on this model today; the structure is asserted, never the model's prose."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from jarvisd._config import Config, SandboxConfig
from jarvisd._paths import paths
from jarvisd._runcontext import RunContext
from jarvisd.cli._code import _render
from jarvisd.code import CodeStore, prepare
from jarvisd.runs import AgentSpec, run_spec
from tests.conftest import real_model_path, require
from tests.sandbox.conftest import engine_problem

from .test_run import TEST_COMMAND

pytestmark = [pytest.mark.model, pytest.mark.docker]


def test_native_openhands_on_a_one_line_bug_reports_what_really_changed(project: Path) -> None:
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
    codes = (None, "no_answer", "no_change")  # a claim with no change fails as no_change
    assert (outcome.failure and outcome.failure.code) in codes, outcome.failure
    record = store.get(ws.id)
    assert record.state in ("done", "failed")
    out = record.outcome
    assert out["test_before"]["passed"] is False
    assert out["test_before"]["verdict"] == "failed"  # a real assertion, not a test_error
    code = outcome.metadata["code"]
    assert code["workspace"] == ws.id
    text = "\n".join(_render(record, diff=True, color=False))
    after = out["test_after"]
    print(f"\n1.5B: {record.state}, changed {out['changed']}, files {out['files']}, "
          f"test after {None if after is None else after['passed']}\n{out['diff'][:600]}")  # fmt: skip
    assert after is not None  # the project's test ran again after the run
    if out["changed"]:
        assert out["diff"].startswith("diff --git a/") and out["files"]
        assert code["files"] == out["files"]
    else:  # whatever the model claimed, the user is told nothing changed
        assert out["files"] == [] and out["diff"] == "" and "files:     no change" in text
        assert after["passed"] is False and "test after:  failed" in text
        if outcome.failure is not None and outcome.failure.code == "no_change":
            assert record.state == "failed" and "though the summary claims one" in text
