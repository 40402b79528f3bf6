"""jarvis code on a real container engine, driven by a scripted engine: the fix comes
back as a diff, the project is untouched until apply, apply makes its test pass,
discard leaves nothing behind; blocked files never reach the sandbox."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from jarvisd._config import Config, SandboxConfig
from jarvisd._errors import WorkspaceError
from jarvisd._paths import paths
from jarvisd._runcontext import RunContext
from jarvisd.code import CodeStore, Workspace, apply, discard, prepare
from jarvisd.engines import ScriptedEngine
from jarvisd.runs import AgentSpec, RunOutcome, run_spec
from tests.conftest import require
from tests.sandbox.conftest import engine_problem

from .conftest import CALC, FIXED, TEST, git, tree_hashes

pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def container_engine() -> None:
    problem = engine_problem()
    require(not problem, problem)


def store() -> CodeStore:
    return CodeStore(paths().state / "code.db")


#: The pytest tests, run by plain Python: the sandbox image has no pytest.
TEST_COMMAND = "python3 -c 'import test_calc as t; t.test_add(); t.test_more()'"


def make(project: Path) -> Workspace:
    return prepare(str(project), store=store(), state_dir=paths().state, task="fix it",
                   test=TEST_COMMAND)  # fmt: skip


def code_block(code: str) -> str:
    return f"```python\n{code}\n```"


def run(ws: Workspace, engine: ScriptedEngine, agent: str = "native_openhands") -> RunOutcome:
    spec = AgentSpec(input="fix the failing test", agent=agent, workspace=ws.id)
    config = Config(sandbox=SandboxConfig(memory="256m"))
    return asyncio.run(run_spec(spec, RunContext(), config, engine))


def fixing_engine(ws: Workspace) -> ScriptedEngine:
    fix = code_block(f"open({ws.path + '/calc.py'!r}, 'w').write({FIXED!r})\nprint('written')")
    return ScriptedEngine.from_replies([fix, "add subtracted; it adds now."])


def test_the_fix_comes_back_as_a_diff_and_applies(project: Path) -> None:
    before = tree_hashes(project)
    ws = make(project)
    assert ws.kind == "git" and ws.state == "ready"
    outcome = run(ws, fixing_engine(ws))
    assert outcome.ok, outcome.failure
    code = outcome.metadata["code"]
    assert code["files"] == [{"status": "M", "path": "calc.py"}]
    assert code["test_before"]["passed"] is False and code["test_after"]["passed"] is True
    record = store().get(ws.id)
    assert record.state == "done"
    assert record.outcome["summary"] == "add subtracted; it adds now."
    assert "-    return a - b\n+    return a + b" in record.outcome["diff"]
    # The uncommitted change and the untracked file came along, and are not the change.
    assert (Path(ws.path) / "README").exists()
    assert "test_more" in (Path(ws.path) / "test_calc.py").read_text()
    assert tree_hashes(project) == before  # untouched until apply

    apply(ws.id, store(), paths().state)
    assert (project / "calc.py").read_text() == FIXED
    after = tree_hashes(project)
    assert {k for k in after if after[k] != before.get(k)} == {"calc.py"}
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           cwd=project, capture_output=True, text=True)  # fmt: skip
    assert tests.returncode == 0, tests.stdout
    # apply removed the workspace: no worktree, no branch, no directory; the record stays.
    assert store().get(ws.id).state == "applied"
    assert not Path(ws.path).parent.exists()
    assert git(project, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(project, "branch", "--list", "jarvis/*") == ""


def test_discard_leaves_no_worktree_or_branch(project: Path) -> None:
    before = tree_hashes(project)
    ws = make(project)
    assert git(project, "--git-dir", ws.git_dir, "branch", "--list", "jarvis/*") != ""
    run(ws, fixing_engine(ws))
    discard(store().get(ws.id), store(), paths().state)
    assert git(project, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(project, "branch", "--list", "jarvis/*") == ""
    assert not Path(ws.path).parent.exists()
    assert tree_hashes(project) == before
    with pytest.raises(WorkspaceError, match="no workspace"):
        store().get(ws.id)


def test_blocked_files_never_reach_the_sandbox(project: Path) -> None:
    (project / ".env").write_text("API_KEY=hunter2\n")
    (project / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    venv = project / ".venv"
    (venv / "lib").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "lib" / "site.py").write_text("")
    ws = make(project)
    names = [".env", "id_rsa", ".venv"]
    look = code_block(
        f"import os\nprint('PRESENT', [os.path.lexists({ws.path!r} + '/' + n) for n in {names!r}])"
    )
    engine = ScriptedEngine.from_replies([look, "looked"])
    outcome = run(ws, engine)
    assert outcome.ok, outcome.failure
    observation = engine.calls[1].messages[-1].content
    assert "PRESENT [False, False, False]" in observation
    left = {x["path"]: x["reason"] for x in outcome.metadata["code"]["left_out"]}
    assert left == {".env": "blocked name (.env*)", "id_rsa": "blocked name (id_rsa*)",
                    ".venv": "a virtual environment"}  # fmt: skip
    assert outcome.metadata["code"]["files"] == []


def test_a_conflicting_apply_is_refused_and_writes_nothing(project: Path) -> None:
    ws = make(project)
    assert run(ws, fixing_engine(ws)).ok
    (project / "calc.py").write_text(CALC.replace("a - b", "b - a"))  # the same line, otherwise
    (project / "other.py").write_text("x = 1\n")
    before = tree_hashes(project)
    with pytest.raises(WorkspaceError, match=r"conflicts with the agent's change \(calc.py\)"):
        apply(ws.id, store(), paths().state)
    assert tree_hashes(project) == before
    assert store().get(ws.id).state == "done"  # kept, to review or discard


def test_a_change_elsewhere_in_the_file_merges(project: Path) -> None:
    ws = make(project)
    assert run(ws, fixing_engine(ws)).ok
    (project / "calc.py").write_text("# header\n\n\n" + CALC)
    apply(ws.id, store(), paths().state)
    assert (project / "calc.py").read_text() == "# header\n\n\n" + FIXED


def test_cancel_stops_the_agent_and_removes_its_container(project: Path) -> None:
    from tests.sandbox.test_escape import our_containers

    ws = make(project)
    engine = ScriptedEngine.from_replies(["never used"], latency_s=60)
    spec = AgentSpec(input="fix it", agent="native_openhands", workspace=ws.id)
    run_context = RunContext()

    async def cancel_soon() -> RunOutcome:
        task = asyncio.ensure_future(
            run_spec(spec, run_context, Config(sandbox=SandboxConfig(memory="256m")), engine)
        )
        while not engine.calls:  # noqa: ASYNC110 - the agent waits for its model: cancel now
            await asyncio.sleep(0.05)
        run_context.cancel.cancel("stop")
        return await task

    outcome = asyncio.run(cancel_soon())
    assert outcome.failure is not None and outcome.failure.code == "cancelled"
    assert not our_containers()
    record = store().get(ws.id)
    assert record.state == "failed" and record.outcome["changed"] is False
    assert record.outcome["test_after"] is None


def test_a_repository_of_50000_files(tmp_path: Path) -> None:
    from benchmarks.bench_code import make_repository

    project = make_repository(tmp_path / "big", 50_000)
    # Its test, so that the test command can run (else it is a test_error).
    (project / "test_calc.py").write_text(
        TEST + "\n\ndef test_more():\n    assert add(0, 0) == 0\n"
    )
    ws = make(project)
    assert ws.files >= 50_000
    outcome = run(ws, fixing_engine(ws))
    assert outcome.ok, outcome.failure
    assert outcome.metadata["code"]["files"] == [{"status": "M", "path": "calc.py"}]
