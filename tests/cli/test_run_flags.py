"""Run options a user gives are used or refused, never silently dropped: --context
reaches every agent's prompt; `--option sandboxed=...` is refused (the sandbox is
chosen by --sandbox / --no-sandbox)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jarvisd.engines import ScriptedEngine, reply
from jarvisd.testing import OllamaStandIn

from .test_cli import jarvis, use_ollama


@pytest.mark.parametrize("agent", ["simple", "react", "orchestrator"])
def test_context_file_reaches_the_prompt(agent: str, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("The code word is heliotrope-42.\n")
    with OllamaStandIn(ScriptedEngine([reply("Final Answer: heliotrope-42")])) as standin:
        use_ollama(standin.url)
        out = jarvis("ask", "--agent", agent, "--context", str(notes), "What is the code word?")
        asked = [b for _, p, b in standin.requests if p == "/api/chat"]
    assert out.returncode == 0, out.stderr
    sent = asked[0]["messages"][-1]["content"]
    assert "heliotrope-42" in sent and "What is the code word?" in sent, sent


@pytest.mark.parametrize("agent", ["openhands", "claude_code"])
def test_option_sandboxed_is_refused_for_the_flags(agent: str, tmp_path: Path) -> None:
    out = jarvis(
        "ask", "--agent", agent, "--option", f"workspace={tmp_path}",
        "--option", "sandboxed=false", "hi",
    )  # fmt: skip
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "--sandbox / --no-sandbox" in out.stderr and "Traceback" not in out.stderr
    listed = json.loads(jarvis("agents", "list", "--json").stdout)
    assert "sandboxed" not in next(r for r in listed if r["key"] == agent)["options"]
