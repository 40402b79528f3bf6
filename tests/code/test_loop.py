"""The test-driven loop and honest outcomes of jarvis code on a real container engine,
driven by a scripted engine: the first message holds the failure, a round that leaves
the tests failing is fed the new failure, a test command that cannot run is a
test_error (not a failing test), a claimed change with an empty diff is no_change."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from jarvisd._config import Config, SandboxConfig
from jarvisd._events import Event, EventType
from jarvisd._messages import Role
from jarvisd._paths import paths
from jarvisd._runcontext import RunContext
from jarvisd.cli import cli
from jarvisd.code import Workspace, prepare
from jarvisd.engines import ScriptedEngine
from jarvisd.runs import AgentSpec, RunOutcome, run_spec

from .conftest import FIXED
from .test_run import container_engine, store  # noqa: F401 - an autouse fixture

pytestmark = pytest.mark.docker

#: The test, run by plain Python (the image has no pytest), saying what add gave.
FIX = "The test fails: fix add in calc.py."
SAYS = "python3 -c 'from calc import add; r = add(2, 3); assert r == 5, f\"add(2, 3) is {r}\"'"


def write(ws: Workspace, text: str) -> str:
    return f"```python\nopen({ws.path + '/calc.py'!r}, 'w').write({text!r})\nprint('written')\n```"


def run(
    ws: Workspace, engine: ScriptedEngine, task: str = "fix add"
) -> tuple[RunOutcome, list[Event]]:
    spec = AgentSpec(input=task, agent="native_openhands", workspace=ws.id)
    context = RunContext()
    events: list[Event] = []
    context.bus.subscribe(events.append, EventType.ROUND)
    outcome = asyncio.run(run_spec(spec, context, Config(sandbox=SandboxConfig(memory="256m")),
                                   engine))  # fmt: skip
    return outcome, events


def first_user_message(engine: ScriptedEngine, call: int) -> str:
    return next(m.content for m in engine.calls[call].messages if m.role is Role.USER)


def test_rounds_feed_back_the_new_failure_until_the_tests_pass(project: Path) -> None:
    ws = prepare(str(project), store=store(), state_dir=paths().state, task=FIX,
                 test=SAYS, rounds=3)  # fmt: skip
    wrong = "def add(a, b):\n    return a * b\n"
    engine = ScriptedEngine.from_replies(
        [write(ws, wrong), "I fixed add.", write(ws, FIXED), "add adds now."]
    )
    outcome, events = run(ws, engine, FIX)
    assert outcome.ok, outcome.failure
    # Round 1's first message: the failing test's output and the file the task names.
    first = first_user_message(engine, 0)
    assert "AssertionError: add(2, 3) is -1" in first and "return a - b" in first
    # Round 2's: it was told the tests still fail, with their new output.
    second = first_user_message(engine, 2)
    assert "round 2 of 3" in second and "You said you were done: I fixed add." in second
    assert "AssertionError: add(2, 3) is 6" in second and "return a * b" in second
    record = store().get(ws.id).outcome
    assert [(r["round"], r["test"]["verdict"]) for r in record["rounds"]] == [
        (1, "failed"), (2, "passed")
    ]  # fmt: skip
    assert record["test_before"]["verdict"] == "failed" and record["test_after"]["passed"]
    assert [(e.data["round"], e.data["of"], e.data["test"]) for e in events] == [
        (1, 3, "failed"), (2, 3, "passed")
    ]  # fmt: skip
    assert outcome.turns == 4 and [r["turns"] for r in record["rounds"]] == [2, 2]
    shown = CliRunner().invoke(cli, ["code", "show", ws.id]).output
    assert "rounds:      2 of 3 (1: failed (exit 1), 2: passed)" in shown


def test_a_test_command_that_cannot_run_is_a_test_error_and_no_round_follows(
    project: Path,
) -> None:
    """The issue's case: the image has no pytest. The agent still runs (its change is
    kept to review), but no round follows and the run fails with test_error."""
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="fix add",
                 test="python3 -m pytest -q", rounds=3)  # fmt: skip
    engine = ScriptedEngine.from_replies([write(ws, FIXED), "add adds now."])
    outcome, events = run(ws, engine)
    assert outcome.failure is not None and outcome.failure.code == "test_error"
    assert "No module named pytest" in outcome.failure.message
    assert "could not run the tests here: No module named pytest" in first_user_message(engine, 0)
    record = store().get(ws.id)
    assert record.state == "done" and record.outcome["files"] == [
        {"status": "M", "path": "calc.py"}
    ]
    for key in ("test_before", "test_after"):
        assert record.outcome[key]["verdict"] == "test_error"
        assert record.outcome[key]["passed"] is False
    assert len(events) == 1 and len(engine.calls) == 2
    shown = CliRunner().invoke(cli, ["code", "show", ws.id]).output
    assert "test before: test_error: No module named pytest" in shown
    assert "failed (exit" not in shown
    data = json.loads(CliRunner().invoke(cli, ["code", "show", ws.id, "--json"]).output)
    assert data["outcome"]["failure"]["code"] == "test_error"


def test_a_claimed_change_with_an_empty_diff_is_no_change(project: Path) -> None:
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="fix add")
    claim = "I changed the function add in calc.py to add its arguments."
    engine = ScriptedEngine.from_replies([claim, claim])  # asked once to act, it claims again
    outcome, _ = run(ws, engine)
    assert len(engine.calls) == 2
    assert "no code has run in this session" in engine.calls[1].messages[-1].content
    assert outcome.failure is not None and outcome.failure.code == "no_change"
    assert outcome.failure.exit_code == 1
    record = store().get(ws.id)
    assert record.state == "failed" and record.outcome["no_change_claimed"] is True
    shown = CliRunner().invoke(cli, ["code", "show", ws.id]).output
    assert "no change, though the summary claims one" in shown and "no_change" in shown
    # A task that asks for no change, answered without one, is a success.
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="explain add")
    outcome, _ = run(ws, ScriptedEngine.from_replies(["I changed nothing: add subtracts."]),
                     task="Explain what add does; do not modify any file.")  # fmt: skip
    assert outcome.ok, outcome.failure


def test_codeact_file_helpers_and_a_claim_without_action_asked_to_act(project: Path) -> None:
    """The session has view / replace / run, named in the prompt, and starts in the
    workspace; a reply that claims a change before any code ran is asked once to act,
    and then it does."""
    ws = prepare(str(project), store=store(), state_dir=paths().state, task=FIX, test=SAYS)
    calc = ws.path + "/calc.py"
    act = (
        f"```python\nview({calc!r})\nreplace({calc!r}, 'return a * b', 'return')\n"
        f"replace({calc!r}, 'a - b', 'a + b')\nrun('python3 -c \"import calc; print(calc.add(2, 3))\"')\n```"
    )
    engine = ScriptedEngine.from_replies(["I fixed add in calc.py.", act, "add adds now."])
    outcome, _ = run(ws, engine, FIX)
    assert outcome.ok, outcome.failure
    system = engine.calls[0].messages[0].content
    assert "view(path, start=1, end=None)" in system and "replace(path, old, new)" in system
    reask = engine.calls[1].messages[-1].content
    assert "no code has run in this session" in reask
    # Told only to "write a block", 1.5B repeated its claim: it is shown the block.
    assert "```python\nreplace('/absolute/path/of/the/file.py', " in reask
    observation = engine.calls[2].messages[-1].content
    assert "    2      return a - b" in observation  # view, numbered
    assert "replace: 0 matches of the snippet" in observation  # refused, nothing changed
    assert "replaced 1 snippet in" in observation and "[exit 0]" in observation
    assert "\n5\n" in observation  # run: the command's output
    record = store().get(ws.id).outcome
    assert record["test_after"]["passed"] and "+    return a + b" in record["diff"]


def test_the_first_message_shows_the_source_that_defines_what_the_failing_test_calls(
    project: Path,
) -> None:
    """The codefix yardstick's case: the task and the failure name only the test's file
    (the assertion fails in the test), so the file to fix was never shown and a small
    model changed the test. The source file defining what the failing line calls is
    shown, before the test's file, and the replace() example names it."""
    test = "python3 -c 'import test_calc as t; t.test_add()'"
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="fix it",
                 test=test)  # fmt: skip
    engine = ScriptedEngine.from_replies([write(ws, FIXED), "add adds now."])
    outcome, _ = run(ws, engine, "The test test_add in test_calc.py fails: fix the bug.")
    assert outcome.ok, outcome.failure
    first = first_user_message(engine, 0)
    assert "assert add(2, 3) == 5" in first  # the failure names add, not calc.py
    source, tests = first.find(f"{ws.path}/calc.py:\n```"), first.find(f"{ws.path}/test_calc.py:")
    assert 0 < source < tests, first
    assert "return a - b" in first
    assert f"replace({ws.path + '/calc.py'!r}, " in first


def test_the_wall_clock_budget_is_one_for_all_the_rounds(project: Path) -> None:
    """--max-wall is the agent's whole run, every round: each round's agent used to
    start the clock again, so a run of 3 rounds could take 3 times its budget. Each
    round's reply takes 6 s and the budget is 10 s: the first round fits (with 4 s for
    its sandbox and tests on a loaded machine: 2 s failed there), the second cannot
    (two replies are 12 s), whatever the machine's speed."""
    ws = prepare(str(project), store=store(), state_dir=paths().state, task=FIX,
                 test=SAYS, rounds=2)  # fmt: skip
    engine = ScriptedEngine.from_replies(["I looked at add.", "I looked again."], latency_s=6.0)
    spec = AgentSpec(input=FIX, agent="native_openhands", workspace=ws.id, max_wall=10.0)
    outcome = asyncio.run(run_spec(spec, RunContext(), Config(sandbox=SandboxConfig(memory="256m")),
                                   engine))  # fmt: skip
    assert outcome.failure is not None and outcome.failure.code == "budget", outcome
    assert "wall-clock budget of 10 s spent" in outcome.failure.message
    assert len(engine.calls) == 2  # the second round's reply was under way
    record = store().get(ws.id).outcome
    assert [r["round"] for r in record["rounds"]] == [1, 2]
    assert record["rounds"][1]["failure"]["code"] == "budget", record["rounds"]


def test_a_run_stopped_mid_reply_counts_the_reply_in_flight(project: Path) -> None:
    """A code run the wall clock stopped after 600 s of a real model's replies said 0
    turns. The sandboxed agent's reply here takes 2 minutes and the budget is 12 s:
    the reply in flight is a turn, of the run and of its round."""
    ws = prepare(str(project), store=store(), state_dir=paths().state, task=FIX, test=SAYS)
    engine = ScriptedEngine.from_replies(["I looked at add."], latency_s=120.0)
    spec = AgentSpec(input=FIX, agent="native_openhands", workspace=ws.id, max_wall=12.0)
    outcome = asyncio.run(run_spec(spec, RunContext(), Config(sandbox=SandboxConfig(memory="256m")),
                                   engine))  # fmt: skip
    assert outcome.failure is not None and outcome.failure.code == "budget", outcome
    assert len(engine.calls) == 1 and outcome.turns == 1, outcome
    assert [r["turns"] for r in store().get(ws.id).outcome["rounds"]] == [1]


def test_a_summary_that_shows_the_code_it_ran_again_is_the_answer(project: Path) -> None:
    """1.5B on the inflection bug: it fixed the file, then summed up with the same code
    block ("I changed add ... The new code: ```python ...```"), which was blocked as a
    repeat, and the same reply to the turn asking for the answer ended the run as an
    error, with the fix made and the tests never run after it."""
    ws = prepare(str(project), store=store(), state_dir=paths().state, task=FIX,
                 test=SAYS, rounds=3)  # fmt: skip
    claim = f"I changed add in calc.py so that it adds.\n\n{write(ws, FIXED)}"
    engine = ScriptedEngine.from_replies([claim, claim, claim])
    outcome, events = run(ws, engine, FIX)
    assert outcome.ok, outcome.failure
    assert outcome.answer.startswith("I changed add in calc.py so that it adds.")
    assert len(engine.calls) == 2
    record = store().get(ws.id).outcome
    assert record["test_after"]["passed"] and [e.data["test"] for e in events] == ["passed"]


#: A whole suite's pytest output: the failure, then a warnings summary longer than the
#: tail the agent is shown (semver's deprecation warnings), then the short summary.
NOISY = (
    "python3 -c 'import sys; print(\"_ test_add _\\nE   AssertionError: add(2, 3) is -1\\n"
    '=== warnings summary ===\\n" + "tests/t.py:1: DeprecationWarning: old\\n" * 200 + '
    '"=== short test summary info ===\\nFAILED test_calc.py::test_add"); sys.exit(1)\''
)


def test_pytests_warnings_summary_does_not_push_the_failure_out_of_the_first_message(
    project: Path,
) -> None:
    ws = prepare(str(project), store=store(), state_dir=paths().state, task=FIX,
                 test=NOISY, rounds=1)  # fmt: skip
    engine = ScriptedEngine.from_replies(["I looked at add."])
    run(ws, engine, FIX)
    first = first_user_message(engine, 0)
    assert "AssertionError: add(2, 3) is -1" in first
    assert "[pytest's warnings summary: 201 lines left out]" in first
    # Only the test command, quoted in the message, still says it.
    assert first.count("DeprecationWarning") == 1 and "FAILED test_calc.py::test_add" in first


def test_a_round_that_ran_no_code_is_told_nothing_changed_not_its_claim(project: Path) -> None:
    """1.5B on toolz-tail: "I changed tail to use a deque", asked to act, the same
    again; the next round repeated its claim to it ("You said you were done: ...") and
    it copied the claim, round after round, with no file changed."""
    ws = prepare(str(project), store=store(), state_dir=paths().state, task=FIX,
                 test=SAYS, rounds=2)  # fmt: skip
    claim = "I changed add in calc.py to use a deque."
    engine = ScriptedEngine.from_replies([claim, claim, write(ws, FIXED), "add adds now."])
    outcome, events = run(ws, engine, FIX)
    assert outcome.ok, outcome.failure
    second = first_user_message(engine, 2)
    assert "round 2 of 2" in second and "use a deque" not in second
    assert "Your last replies ran no code, so no file has changed" in second
    assert [e.data["test"] for e in events] == ["failed", "passed"]


def test_a_cells_long_output_is_clipped_for_the_models_next_reply(project: Path) -> None:
    """view() of a whole long module printed 10,000 characters into the next reply's
    prompt (minutes of a 1.5B model's time): a code run clips what a cell prints."""
    ws = prepare(str(project), store=store(), state_dir=paths().state, task=FIX, test=SAYS)
    noisy = "```python\nprint('x' * 20000)\n```"
    engine = ScriptedEngine.from_replies([noisy, write(ws, FIXED), "add adds now."])
    outcome, _ = run(ws, engine, FIX)
    assert outcome.ok, outcome.failure
    observation = engine.calls[1].messages[-1].content
    assert "x" * 3000 in observation and "x" * 4100 not in observation
