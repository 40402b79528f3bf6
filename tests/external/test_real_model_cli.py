"""opencode and codex as a new user runs them (issue 30): `jarvis ask --agent NAME` on
the embedded engine's Qwen2.5-Coder-1.5B with default flags (no --tools, the default
4096-token window, the agent's own temperature), as root, in a 0700 project directory
under a private home, jarvis's default directories. Each answers a question about
the project (its structure is asserted, not its wording: a 1.5B model's answer is
not ours to fix), and the run is in `trace list` as ok with its agent and input.

Slow on two loaded cores: the agents' first prompts are 7,000 to 8,500 tokens (the
window grows for them); one question each."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.conftest import real_model_path, require

from .test_as_a_user import User
from .test_real_agents import _ready, real_agents_dir  # noqa: F401 - fixture

pytestmark = [
    pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(2500),
    pytest.mark.usefixtures("real_agents_dir"),
]  # fmt: skip

MODEL = "qwen2.5-coder-1.5b"
QUESTION = "What does main.py print? Answer in one short sentence."


@pytest.mark.parametrize("name", ["opencode", "codex"])
def test_agent_answers_about_a_project_on_the_default_model(name: str) -> None:
    require(os.geteuid() == 0, "the case of the issue: jarvis run as root")
    _ready(name)
    models = real_model_path(MODEL).parent
    home = Path(tempfile.mkdtemp(prefix="jv-home-", dir=os.path.expanduser("~")))
    try:
        me = User(home)
        data = home / ".local/share/jarvis"
        data.mkdir(parents=True)
        (data / "models").symlink_to(models, target_is_directory=True)
        (me.project / "main.py").write_text('from config import NAME\n\nprint("hello", NAME)\n')
        (me.project / "config.py").write_text('NAME = "demo"\n')
        out = me.jarvis("ask", "--no-daemon", "--agent", name, QUESTION, timeout=2300)
        assert out.returncode == 0, (out.stdout, out.stderr)
        answer = out.stdout.strip()
        assert answer, out.stderr
        # Only the agent's answer: no agent notice, no echoed harness text.
        assert "Model metadata" not in answer and "system-reminder" not in answer, answer
        traces = [t for t in me.traces() if t["agent"] == name]
        assert len(traces) == 1, me.traces()
        assert traces[0]["input"] == QUESTION and traces[0]["error"] == "", traces[0]
        assert str(traces[0]["content"]).strip(), traces[0]
    finally:
        shutil.rmtree(home, ignore_errors=True)
