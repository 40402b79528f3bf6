"""The `jarvis code` commands without a container: help, routing, the record shown,
errors as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from jarvisd._paths import paths
from jarvisd.cli import cli
from jarvisd.code import CodeStore, prepare
from jarvisd.code._workspace import snapshot

from .conftest import FIXED


def invoke(*args: str) -> object:
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize("sub", ["run", "list", "show", "apply", "discard", "resume"])
def test_every_subcommand_has_help(sub: str) -> None:
    result = CliRunner().invoke(cli, ["code", sub, "--help"])
    assert result.exit_code == 0 and "Usage: cli code " + sub in result.output


def test_a_path_first_means_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["code", str(tmp_path / "missing"), "fix"])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_list_show_and_errors(project: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["code", "list"]).output == "no workspaces\n"
    store = CodeStore(paths().state / "code.db")
    ws = prepare(str(project), store=store, state_dir=paths().state, task="fix add")
    (Path(ws.path) / "calc.py").write_text(FIXED)
    change = snapshot(ws)
    files = [{"status": s, "path": p} for s, p in change.files]
    store.update(ws, state="done", outcome={"result": change.result, "files": files,
                                            "diff": change.diff, "summary": "fixed \x1b[2Jit"})  # fmt: skip
    listed = runner.invoke(cli, ["code", "list"]).output
    assert ws.id in listed and "done" in listed and "fix add" in listed
    (entry,) = json.loads(runner.invoke(cli, ["code", "list", "--json"]).output)
    assert entry["id"] == ws.id and "diff" not in entry["outcome"]
    shown = runner.invoke(cli, ["code", "show", ws.id[:6]]).output
    assert "+    return a + b" in shown and "M calc.py" in shown
    assert json.loads(runner.invoke(cli, ["code", "show", ws.id, "--json"]).output)["outcome"][
        "diff"
    ].startswith("diff --git")
    from jarvisd.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["code", "show", "ffffff"])
    assert exit_info.value.code == 1
    assert runner.invoke(cli, ["code", "discard", ws.id]).output == f"discarded {ws.id}\n"
    assert runner.invoke(cli, ["code", "list"]).output == "no workspaces\n"


def test_the_none_backend_is_refused_with_a_clear_failure(project: Path) -> None:
    import asyncio

    from jarvisd._config import Config, SandboxConfig
    from jarvisd._runcontext import RunContext
    from jarvisd.runs import AgentSpec, run_spec

    ws = prepare(str(project), store=CodeStore(paths().state / "code.db"),
                 state_dir=paths().state)  # fmt: skip
    spec = AgentSpec(input="x", agent="native_openhands", workspace=ws.id)
    config = Config(sandbox=SandboxConfig(backend="none"))
    outcome = asyncio.run(run_spec(spec, RunContext(), config))
    assert outcome.failure is not None and outcome.failure.code == "usage"
    assert 'sandbox.backend = "docker"' in outcome.failure.message


def test_a_running_workspace_is_not_discarded_and_a_dead_run_shows_interrupted(
    project: Path,
) -> None:
    from jarvisd.code._store import this_process

    store = CodeStore(paths().state / "code.db")
    ws = prepare(str(project), store=store, state_dir=paths().state)
    store.update(ws, state="running", runner=this_process())
    result = CliRunner().invoke(cli, ["code", "discard", ws.id])
    assert "is running" in str(result.exception)
    assert Path(ws.path).is_dir()
    store.update(ws, state="running", runner="999999999:1.0")  # that process is gone
    assert "interrupted" in CliRunner().invoke(cli, ["code", "list"]).output
    assert CliRunner().invoke(cli, ["code", "discard", ws.id]).exit_code == 0


def test_resume_refuses_what_is_not_an_interrupted_run_with_the_reason(project: Path) -> None:
    from jarvisd.code._store import this_process

    store = CodeStore(paths().state / "code.db")
    ws = prepare(str(project), store=store, state_dir=paths().state)
    said = str(CliRunner().invoke(cli, ["code", "resume", ws.id]).exception)
    assert "is ready, not interrupted" in said
    store.update(ws, state="running", runner=this_process())
    said = str(CliRunner().invoke(cli, ["code", "resume", ws.id]).exception)
    assert "is still running" in said
    store.update(ws, state="running", runner="999999999:1.0")  # gone, and no progress
    said = str(CliRunner().invoke(cli, ["code", "resume", ws.id]).exception)
    assert "kept no record of its progress" in said
    said = str(CliRunner().invoke(cli, ["code", "resume", "0123456789ab"]).exception)
    assert "no workspace" in said


def test_candidates_and_agents_must_agree(project: Path) -> None:
    result = invoke("code", str(project), "fix", "--candidates", "3", "--agents", "a,b")
    assert result.exit_code != 0  # type: ignore[attr-defined]
    assert "--agents name 2 agents" in str(result.exception)  # type: ignore[attr-defined]
    assert CodeStore(paths().state / "code.db").list() == []  # nothing made
