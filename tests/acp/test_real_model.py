"""One ``acpx`` prompt to ``jarvis acp --agent orchestrator --tools calculator`` on the
embedded engine's Qwen2.5-Coder-1.5B: the answer holds the calculator's result. Its
structure is asserted (a calculator call, completed, whose output is in the answer),
not the model's wording."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import link_real_models, require

from ._client import env
from .test_acpx import ACPX, updates

pytestmark = [pytest.mark.model, pytest.mark.slow]

MODEL = "qwen2.5-coder-1.5b"


def test_acpx_prompt_on_a_real_model_uses_the_calculator(tmp_path: Path) -> None:
    require(ACPX.exists(), f"acpx is not installed in {ACPX} (run packaging/dev/setup.sh --test)")
    link_real_models(MODEL)
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    agent = shlex.join([sys.executable, "-m", "jarvisd", "acp", "--engine", "llamacpp",
                        "--model", MODEL, "--agent", "orchestrator", "--tools", "calculator",
                        "--temperature", "0"])  # fmt: skip
    done = subprocess.run(
        [str(ACPX), "--ttl", "2", "--format", "json", "--timeout", "1100", "--agent", agent,
         "exec", "What is 1234 * 5678? Use the calculator."],
        env=env(HOME=str(home)), cwd=project, capture_output=True, text=True, timeout=1200,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    starts = [u for u in updates(out, "tool_call") if u["title"] == "calculator"]
    assert starts, done.stdout[-3000:]
    ends = {u["toolCallId"]: u for u in updates(out, "tool_call_update")}
    results = [ends[s["toolCallId"]] for s in starts if s["toolCallId"] in ends]
    assert any(r["status"] == "completed" and "7006652" in json.dumps(r) for r in results), results
    text = "".join(u["content"]["text"] for u in updates(out, "agent_message_chunk"))
    assert "7006652" in text.replace(",", "").replace(" ", ""), text
    assert any(m.get("result", {}).get("stopReason") == "end_turn" for m in out)
