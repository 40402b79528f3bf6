"""jarvis code with an external agent: opencode, sandboxed, through the run's inference
gateway on a scripted engine, fixes the fixture project's bug with its own edit tool,
in the workspace (its cwd, mounted read-write), and the change comes back as a diff."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from jarvisd._config import parse_config
from jarvisd._events import Event
from jarvisd._messages import Generation, Message, ToolSpec
from jarvisd._paths import paths
from jarvisd._runcontext import RunContext
from jarvisd.code import CodeStore, apply, prepare
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.external import BUILTIN, installed
from jarvisd.runs import AgentSpec, run_spec
from tests.conftest import require
from tests.sandbox.conftest import engine_problem

from .conftest import CALC, FIXED, tree_hashes


@pytest.fixture
def opencode_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container engine, and opencode's npm tree where setup.sh --test installed it
    (the suite's own cache dir is a fresh temporary one)."""
    problem = engine_problem()
    require(not problem, problem)
    monkeypatch.setenv(
        "JARVIS_AGENTS_DIR",
        os.environ.get("JARVIS_TEST_AGENTS_DIR") or os.path.expanduser("~/.cache/jarvis/agents"),
    )
    require(installed(BUILTIN["opencode"]), "needs `jarvis agents install opencode`")


def fixing_opencode(calc: str) -> ScriptedEngine:
    """opencode's model: a title for its tool-less calls; then read ``calc`` (opencode
    edits only a file read in the session), edit it, and sum up once the edit is back."""

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if not tools:
            return reply("Fix add")
        names = {t.name for t in tools}
        assert {"read", "edit"} <= names, sorted(names)
        results = [m for m in messages if m.role == "tool"]
        if not results:
            return reply("", ("read", {"filePath": calc}))
        if len(results) == 1:
            edit = {"filePath": calc, "oldString": "a - b", "newString": "a + b"}
            return reply("", ("edit", edit))
        return reply("add subtracted; it adds now.")

    return ScriptedEngine(fallback=answer)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.usefixtures("opencode_ready")
def test_opencode_fixes_the_bug_and_the_change_comes_back_as_a_diff(project: Path) -> None:
    before = tree_hashes(project)
    store = CodeStore(paths().state / "code.db")
    ws = prepare(str(project), store=store, state_dir=paths().state, task="fix it",
                 agent="opencode")  # fmt: skip
    engine = fixing_opencode(ws.path + "/calc.py")
    spec = AgentSpec(input="fix the failing test", agent="opencode", workspace=ws.id,
                     max_wall=240)  # fmt: skip
    run, events = RunContext(), list[Event]()
    run.bus.subscribe(events.append)
    # edit = "ask" in the config: a jarvis code run allows editing its workspace anyway.
    config = parse_config({"sandbox": {"memory": "1g"}, "agents": {"permissions": {"edit": "ask"}}})
    outcome = asyncio.run(run_spec(spec, run, config, engine))

    assert outcome.ok, outcome.failure
    assert outcome.metadata["sandboxed"] is True
    assert outcome.metadata["workspace"] == ws.path  # its cwd: the workspace
    assert any(e.type.value == "inference_start" for e in events)  # through the gateway
    edits = [e for e in events if e.type.value == "permission" and e.data["kind"] == "edit"]
    assert edits and all(e.data["allowed"] for e in edits)
    code = outcome.metadata["code"]
    assert code["files"] == [{"status": "M", "path": "calc.py"}]
    record = store.get(ws.id)
    assert record.state == "done"
    assert record.outcome["summary"] == "add subtracted; it adds now."
    assert "-    return a - b\n+    return a + b" in record.outcome["diff"]
    assert (Path(ws.path) / "calc.py").read_text() == FIXED
    assert (project / "calc.py").read_text() == CALC
    assert tree_hashes(project) == before  # untouched until apply

    apply(ws.id, store, paths().state)
    assert (project / "calc.py").read_text() == FIXED


def test_an_agent_workspace_of_its_own_is_refused_and_the_workspace_stays_ready(
    project: Path,
) -> None:
    store = CodeStore(paths().state / "code.db")
    ws = prepare(str(project), store=store, state_dir=paths().state, task="fix it",
                 agent="opencode")  # fmt: skip
    spec = AgentSpec(input="fix it", agent="opencode", workspace=ws.id,
                     options={"workspace": str(project)})  # fmt: skip
    outcome = asyncio.run(run_spec(spec, RunContext(), parse_config({}), ScriptedEngine()))
    assert outcome.failure is not None and outcome.failure.code == "usage"
    assert "sets the agent's workspace itself" in outcome.failure.message
    assert store.get(ws.id).state == "ready"  # not taken: it can still run a task
