"""Honest outcomes without a container: a test command that could not run is a
test_error with its reason, never a failing test; a summary that claims a change;
the files a failure names are read only below the workspace, bounded."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from jarvisd._paths import paths
from jarvisd.code import CodeStore, prepare
from jarvisd.code._prompt import asks_no_change, claims_change, task_prompt
from jarvisd.code._testrun import MAX_TEST_OUTPUT, judge, named_files, run_test

PYTEST = "python3 -m pytest -q test_inflection.py"


@pytest.mark.parametrize(
    ("command", "exit_code", "output", "reason", "verdict", "why"),
    [
        ("python3 -m unittest", 0, "OK", "", "passed", ""),
        ("python3 -m unittest", 1, "FAILED (failures=1)", "", "failed", ""),
        # The case: before and after, `failed (exit 1)` it was not.
        (PYTEST, 1, "/usr/bin/python3: No module named pytest\n", "", "test_error",
         "No module named pytest"),
        ("pytest -q", 127, "sh: 1: pytest: not found\n", "", "test_error", "pytest: not found"),
        ("./run-tests", 126, "sh: 1: ./run-tests: Permission denied\n", "", "test_error",
         "exit 126"),
        (PYTEST, 2, "____ ERROR collecting test_inflection.py ____\nImportError", "", "test_error",
         "collection error in test_inflection.py"),
        (PYTEST, 5, "no tests ran in 0.01s", "", "test_error", "collected no tests"),
        (PYTEST, 4, "ERROR: usage: ...", "", "test_error", "usage error"),
        (PYTEST, 1, "1 failed, 454 passed", "", "failed", ""),
        # An import error inside a pytest test is that test's failure.
        (PYTEST, 1, "E   ModuleNotFoundError: No module named 'yaml'", "", "failed", ""),
        ("python3 -m unittest", 1, "ModuleNotFoundError: No module named 'yaml'", "",
         "test_error", "No module named 'yaml'"),
        # ... but a module of the project's own that is missing is the project's bug.
        ("python3 -m unittest", 1, "ModuleNotFoundError: No module named 'calc'", "",
         "failed", ""),
        ("python3 -m unittest", -1, "", "timeout", "test_error", "timed out after 60 s"),
        ("python3 -m unittest", 137, "", "oom", "test_error", "out of memory"),
    ],
)  # fmt: skip
def test_a_test_command_that_could_not_run_is_a_test_error(
    tmp_path: Path, command: str, exit_code: int, output: str, reason: str, verdict: str, why: str
) -> None:
    (tmp_path / "calc.py").write_text("")
    got, error = judge(command, exit_code, output, reason, 60, tmp_path)
    assert got == verdict
    assert why in error and bool(error) == (verdict == "test_error")


@pytest.mark.parametrize(
    ("summary", "claims"),
    [
        ("I changed the function dasherize in inflection/__init__.py to replace "
         "underscores with dashes.", True),
        ("Fixed the bug: add adds now.", True),
        ("Updated calc.py.", True),
        ("The code is already correct; no change was needed.", False),
        ("I could not fix it: the tests do not run.", False),
        ("I did not modify any file.", False),
        ("I changed nothing: add subtracts.", False),
        ("The function should be changed to add.", False),
        ("The address of the bug is line 3.", False),
    ],
)  # fmt: skip
def test_a_summary_that_claims_a_change(summary: str, claims: bool) -> None:
    assert claims_change(summary) is claims


@pytest.mark.parametrize(
    ("task", "asks"),
    [
        ("Fix the bug in dasherize.", False),
        ("Explain what dasherize does.", True),
        ("Review calc.py but do not modify any file.", True),
        ("Why does test_add fail?", True),
    ],
)
def test_a_task_that_asks_for_no_change(task: str, asks: bool) -> None:
    assert asks_no_change(task) is asks


def test_the_files_a_failure_names_stay_below_the_workspace_and_bounded(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (ws / "big.py").write_text("x = 1\n" * 10_000)
    outside = tmp_path / "secret.py"
    outside.write_text("KEY = 'hunter2'\n")
    (ws / "link.py").symlink_to(outside)  # what an agent can leave behind
    (ws / "dirlink").symlink_to(tmp_path)
    output = (
        f'File "{ws}/pkg/mod.py", line 2, in f\n'
        f'File "{outside}", line 1\n'
        "link.py:1: AssertionError\ndirlink/secret.py:1\n../secret.py:1\n"
        f"FAILED big.py::test_x\n"
    )
    files = named_files([output], ws, max_files=5, max_bytes=2000)
    assert [rel for rel, _ in files] == ["pkg/mod.py", "big.py"]
    assert files[0][1] == "def f():\n    return 1\n"
    assert files[1][1].endswith("[... the rest of the file is left out ...]")
    assert sum(len(text.encode()) for _, text in files) < 2100
    assert "hunter2" not in repr(files)


def test_the_first_message_holds_the_failure_and_the_files_it_names(project: Path) -> None:
    from jarvisd.code._testrun import TestRun

    store = CodeStore(paths().state / "code.db")
    ws = prepare(str(project), store=store, state_dir=paths().state, test="t")
    noise = "x" * 20_000
    output = f'{noise}\nFile "{ws.path}/calc.py", line 2, in add\nAssertionError: add(2, 3) is -1'
    before = TestRun("t", 1, output, 0.1, verdict="failed")
    prompt = task_prompt(ws, "fix add", before)
    assert "AssertionError: add(2, 3) is -1" in prompt
    assert "return a - b" in prompt  # calc.py, as it is
    assert len(prompt.encode()) < 8000  # the output's tail only
    could_not = TestRun("t", 1, "/usr/bin/python3: No module named pytest", 0.1,
                        verdict="test_error", error="No module named pytest")  # fmt: skip
    assert "could not run the tests here: No module named pytest" in task_prompt(
        ws, "fix add in calc.py", could_not
    )


def test_the_output_kept_is_bounded_while_it_is_read(project: Path) -> None:
    """50 MB of output: the head (where a runner that cannot start says so) and the
    tail (where failures are summed up) are kept, never more."""
    from jarvisd.executors import SubprocessExecutor

    script = (
        "import sys; print('FIRST LINE'); sys.stdout.flush(); "
        "[sys.stdout.write('y' * 999 + chr(10)) for _ in range(50_000)]; "
        "sys.stdout.write('z' * 200_000); print(); print('LAST LINE'); sys.exit(1)"
    )
    ws = prepare(str(project), store=CodeStore(paths().state / "code.db"),
                 state_dir=paths().state, test=f"{sys.executable} -c \"{script}\"")  # fmt: skip
    result = asyncio.run(run_test(SubprocessExecutor(), ws, 120))
    assert result.verdict == "failed" and result.exit_code == 1
    assert result.output.startswith("FIRST LINE") and result.output.rstrip().endswith("LAST LINE")
    assert "bytes of output left out" in result.output
    assert len(result.output.encode()) < MAX_TEST_OUTPUT + 100
    assert os.path.isdir(ws.path)


def test_a_round_after_a_change_that_broke_the_tests_shows_their_output(project: Path) -> None:
    from jarvisd.code._prompt import round_prompt
    from jarvisd.code._testrun import TestRun

    ws = prepare(str(project), store=CodeStore(paths().state / "code.db"),
                 state_dir=paths().state, test="python3 -m pytest -q")  # fmt: skip
    broken = TestRun("t", 2, "ERROR collecting test_calc.py\nSyntaxError: invalid syntax", 0.1,
                     verdict="test_error", error="pytest was interrupted")  # fmt: skip
    prompt = round_prompt(ws, "fix add", broken, "I fixed it.", 2, 3)
    assert "After your change the test command could not run" in prompt
    assert "SyntaxError: invalid syntax" in prompt and "will not make it run" not in prompt
