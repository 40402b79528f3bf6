"""The spec's edges: one isolation field (old specs still load), one kind per run,
each kind's runner from the registry, and build_agent's typed options."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from jarvisd import _errors
from jarvisd._config import Config
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine
from jarvisd.runs import (
    AgentSpec,
    BuildOptions,
    RunOutcome,
    _execute,
    _kinds,
    build_agent,
    run_spec,
)

# -- isolation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "old, isolation",
    [({"sandbox": True}, "sandbox"), ({"no_sandbox": True}, "host"),
     ({"sandbox": False, "no_sandbox": False}, "default"), ({}, "default")],
)  # fmt: skip
def test_a_spec_stored_by_an_older_version_still_loads(
    old: dict[str, bool], isolation: str
) -> None:
    # The daemon's SQLite keeps durable tasks' specs as older versions wrote them.
    spec = AgentSpec.from_dict({"input": "q", **old})
    assert spec.isolation == isolation
    assert "sandbox" not in spec.to_dict() and "no_sandbox" not in spec.to_dict()
    assert AgentSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize(
    "data, named",
    [({"sandbox": True, "no_sandbox": True}, "'sandbox' and 'no_sandbox' contradict"),
     ({"sandbox": True, "isolation": "host"}, "'sandbox' and 'isolation' contradict"),
     ({"no_sandbox": True, "isolation": "sandbox"}, "'no_sandbox' and 'isolation' contradict"),
     ({"isolation": "container"}, "'isolation' must be one of sandbox, host, default"),
     ({"isolation": True}, "'isolation' must be one of"),
     ({"no_sandbox": "yes"}, "'no_sandbox' has the wrong type")],
)  # fmt: skip
def test_isolation_is_refused_when_unknown_or_contradicted(
    data: dict[str, object], named: str
) -> None:
    with pytest.raises(_errors.UsageError, match=named):
        AgentSpec.from_dict({"input": "q", **data})


def test_an_old_flag_that_agrees_with_isolation_is_accepted() -> None:
    spec = AgentSpec.from_dict({"input": "q", "sandbox": True, "isolation": "sandbox"})
    assert spec.isolation == "sandbox"


# -- kinds ----------------------------------------------------------------------------


def test_a_spec_is_one_kind_of_run() -> None:
    assert AgentSpec("q").kind == "agent"
    assert AgentSpec("q", team="[team]").kind == "team"
    assert AgentSpec("q", workspace="ws1").kind == "workspace"
    with pytest.raises(_errors.UsageError, match="'team' and 'workspace' are two kinds"):
        AgentSpec.from_dict({"input": "q", "team": "[team]", "workspace": "ws1"})


def test_every_kind_has_a_runner_and_an_unknown_kind_is_refused() -> None:
    assert set(_kinds.KINDS) == {"agent", "team", "workspace"}
    for kind in _kinds.KINDS:
        assert callable(_kinds.runner_for(kind))
    with pytest.raises(_errors.UsageError, match="unknown run kind 'robot'"):
        _kinds.runner_for("robot")


def test_run_spec_runs_a_spec_with_its_kinds_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, _kinds.RunHow]] = []

    async def runner(
        spec: AgentSpec, run: RunContext, config: Config, engine: object, how: _kinds.RunHow, /
    ) -> RunOutcome:
        seen.append((spec.kind, how))
        return RunOutcome(answer=spec.kind)

    monkeypatch.setattr("jarvisd.code._kind.run_workspace", runner)
    outcome = asyncio.run(run_spec(AgentSpec("q", workspace="ws1"), RunContext(), Config()))
    assert outcome.answer == "workspace" and seen[0][1].trace is True
    monkeypatch.setattr(_execute, "run_agent", runner)
    outcome = asyncio.run(run_spec(AgentSpec("q"), RunContext(), Config(), trace=False))
    assert outcome.answer == "agent" and seen[1][1].trace is False


def test_a_kind_that_cannot_be_imported_is_the_runs_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kinds = {**_kinds.KINDS, "agent": "jarvisd.nowhere:run"}
    monkeypatch.setattr(_kinds, "KINDS", kinds)
    outcome = asyncio.run(run_spec(AgentSpec("q"), RunContext(), Config()))
    assert outcome.failure is not None and "jarvisd.nowhere" in outcome.failure.message


# -- build_agent's options ------------------------------------------------------------


def test_build_options_reach_the_agent_and_the_spec_still_wins() -> None:
    from jarvisd.executors import SubprocessExecutor

    executor = SubprocessExecutor()
    spec = AgentSpec("q", agent="rlm", max_tokens=77)
    options = BuildOptions(extra={"executor": executor, "max_tokens": 5})
    agent = build_agent(spec, Config(), ScriptedEngine([]), options)
    assert getattr(agent, "code_executor", None) is executor  # not one from the config
    assert agent.max_tokens == 77
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.extra = {}  # type: ignore[misc]


def test_a_durable_task_stored_with_the_old_flags_loads(tmp_path: Path) -> None:
    # As a daemon of an older version left it in its SQLite: the spec JSON with
    # "sandbox"/"no_sandbox" and no "isolation".
    from jarvisd.daemon import TaskStore

    store = TaskStore(tmp_path / "tasks.db")
    store.open()
    try:
        task_id = store.create(AgentSpec("q")).id
        old = {k: v for k, v in AgentSpec("q").to_dict().items() if k != "isolation"}
        old.update(sandbox=False, no_sandbox=True)
        store.db.execute("UPDATE tasks SET spec = ? WHERE id = ?", (json.dumps(old), task_id))
        assert store.get(task_id).spec.isolation == "host"
    finally:
        store.close()
