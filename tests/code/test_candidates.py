"""Verified candidates: several agents on the same task, each in its own workspace, under
one run (one budget), ranked by the project's tests (all pass, then fewest failures,
then smallest diff); `show` side by side, `apply` the best or --candidate K."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from jarvisd._config import Config, SandboxConfig
from jarvisd._events import EventType
from jarvisd._messages import Generation, Message, Role, ToolSpec
from jarvisd._paths import paths
from jarvisd._runcontext import RunContext
from jarvisd.cli import cli
from jarvisd.code import CodeStore, Workspace
from jarvisd.code._candidates import failure_count, group_of, prepare_group, rank
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import AgentSpec, run_spec

from .conftest import FIXED


def store() -> CodeStore:
    return CodeStore(paths().state / "code.db")


def _with(ws: Workspace, **outcome: object) -> Workspace:
    return Workspace(id=f"{ws.candidate:012x}", source="", kind="copy", path="", git_dir="",
                     branch="", base="", candidate=ws.candidate, outcome=outcome)  # fmt: skip


def _test(verdict: str, output: str = "") -> dict[str, object]:
    return {"verdict": verdict, "passed": verdict == "passed", "output": output}


def _ws(k: int) -> Workspace:
    return Workspace(id="", source="", kind="copy", path="", git_dir="", branch="", base="",
                     candidate=k)  # fmt: skip


def test_the_ranking_passed_then_fewest_failures_then_smallest_diff() -> None:
    small, big = "+x\n-y\n", "+x\n+x\n+x\n-y\n"
    members = [
        _with(_ws(1), changed=False, diff="", test_after=_test("passed")),  # nothing to apply
        _with(_ws(2), changed=True, diff=small, test_after=_test("failed", "FAILED (failures=3)")),
        _with(_ws(3), changed=True, diff=big, test_after=_test("passed")),
        _with(_ws(4), changed=True, diff=big, test_after=_test("failed", "1 failed, 9 passed")),
        _with(_ws(5), changed=True, diff=small, test_after=_test("passed")),
        _with(_ws(6), changed=True, diff=small, test_after=_test("test_error")),
        _with(_ws(7), changed=True, diff=small, test_after=_test("failed", "no summary")),
        _with(_ws(8), changed=True, diff=small, test_after=_test("passed"),
              failure={"code": "budget", "message": "spent"}),
    ]  # fmt: skip
    assert [r.candidate for r in rank(members)] == [5, 3, 4, 2, 7, 6, 1, 8]


@pytest.mark.parametrize(
    ("output", "count"),
    [
        ("FAILED (failures=2, errors=1)", 3),
        ("Ran 3 tests\n\nFAILED (errors=1)", 1),
        ("== 2 failed, 453 passed, 1 error in 0.5s ==", 3),
        ("=== 1 failed in 0.1s ===", 1),
        ("AssertionError", None),
    ],
)
def test_failure_counts_from_the_runners_summary(output: str, count: int | None) -> None:
    assert failure_count(output) == count


def _brief(ws: Workspace) -> str:
    """What decided a candidate's rank, on one line."""
    out = ws.outcome
    after = out.get("test_after") or {}
    return json.dumps([ws.candidate, out.get("changed"), out.get("failure"), after.get("verdict"),
                       after.get("exit_code"), str(after.get("output"))[:600], out.get("summary")])  # fmt: skip


UNIT = (
    "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
    "    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n"
)
#: What each candidate writes: two failures, a fix with noise, one failure, the fix.
WRITES = {
    1: "def add(a, b):\n    return a - b - 1\n",
    2: "# the sum\n# of a and b\ndef add(a, b):\n    total = a + b\n    return total\n",
    3: "def add(a, b):\n    return a * b\n",
    4: FIXED,
}


@pytest.mark.docker
def test_candidates_are_ranked_by_the_tests_and_the_best_applied(project: Path) -> None:
    from tests.conftest import require
    from tests.sandbox.conftest import engine_problem

    problem = engine_problem()
    require(not problem, problem)
    (project / "test_u.py").write_text(UNIT)
    lead = prepare_group(str(project), store=store(), state_dir=paths().state, task="fix add",
                         agents=["native_openhands"] * 4, test="python3 -m unittest -q test_u")  # fmt: skip
    # Each candidate sets up the same environment: it is mounted once into each sandbox
    # (the candidates share one run context; a second bind of /opt/jarvis-env was
    # refused by the engine as a duplicate mount point).
    members = [store().update(ws, setup="true") for ws in group_of(store(), lead)]
    where = {ws.path: ws.candidate for ws in members}

    def candidate(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if any(m.role is Role.ASSISTANT for m in messages):
            return reply("I fixed add.")
        prompt = next(m.content for m in messages if m.role is Role.USER)
        path = prompt.split("in the directory ", 1)[1].split(" ", 1)[0]
        text = WRITES[where[path]]
        return reply(
            f"```python\nopen({path + '/calc.py'!r}, 'w').write({text!r})\nprint('ok')\n```"
        )

    engine = ScriptedEngine(fallback=candidate)
    spec = AgentSpec(input="fix add", agent="native_openhands", workspace=lead.id)
    context = RunContext()
    config = Config(sandbox=SandboxConfig(memory="256m"))
    outcome = asyncio.run(run_spec(spec, context, config, engine))
    assert outcome.ok, outcome.failure
    code = outcome.metadata["code"]
    # Twice in CI a candidate ranked low for a reason the ranking alone did not tell:
    # each member's whole outcome is in the message.
    seen = "\n".join(_brief(store().get(m.id)) for m in members)
    assert [c["candidate"] for c in code["candidates"]] == [4, 2, 3, 1], seen
    assert [c["failures"] for c in code["candidates"]] == [0, 0, 1, 2], seen
    assert code["best"] == 4 and code["workspace"] == members[3].id
    assert context.budget.calls == 8 and outcome.turns == 8  # one run, one ledger
    # Each candidate's record followed the tool calls on the run's bus, and a record
    # written was overwritten from a stale copy by another candidate's later call (its
    # outcome lost: CI ranked a candidate last for it). A call after the end touches none.
    ended = [store().get(m.id) for m in members]
    context.bus.publish(EventType.TOOL_CALL_START, call_id="late", tool="x")
    touched = [
        m.candidate for m, was in zip(members, ended, strict=True) if store().get(m.id) != was
    ]
    assert not touched, f"candidates {touched}'s records changed after the run"
    shown = CliRunner().invoke(cli, ["code", "show", lead.id]).output
    rows = [line.split()[1] for line in shown.splitlines() if line.startswith("  ") and
            line.split()[0].isdigit()][:4]  # fmt: skip
    assert "ranked by the tests" in shown and rows == ["4", "2", "3", "1"]
    assert "candidate 4 (" in shown and "+    return a + b" in shown
    data = json.loads(CliRunner().invoke(cli, ["code", "show", lead.id, "--json"]).output)
    assert data["best"] == 4 and len(data["workspaces"]) == 4
    refused = CliRunner().invoke(cli, ["code", "apply", lead.id, "--candidate", "9"])
    assert refused.exit_code != 0 and "not 9" in str(refused.exception)
    applied = CliRunner().invoke(cli, ["code", "apply", lead.id])  # the first names the group
    assert applied.exit_code == 0, applied.output
    assert (project / "calc.py").read_text() == FIXED
    assert store().get(members[3].id).state == "applied"
