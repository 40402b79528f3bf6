"""The codefix yardstick: its corpus (pinned sdists, mutations that apply once), its
judge (a fix may not change the tests), and one bug end to end in the sandbox: made
from its sdist, `jarvis eval code` fixing it on a scripted engine, then the pristine
suite passing and the bug failing exactly its tests."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from jarvisd._config import Config
from jarvisd._errors import UsageError
from jarvisd._paths import paths
from jarvisd.cli import cli
from jarvisd.engines import ScriptedEngine
from jarvisd.evals.codefix import (
    BugRepo,
    BuildError,
    build_bug,
    check_bug,
    failing_tests,
    fetch_sdist,
    fixed_tree,
    load_corpus,
    mutate,
    pristine,
)
from jarvisd.evals.codefix._corpus import KINDS
from jarvisd.runs import _execute
from tests.conftest import IN_CI, require

CORPUS = load_corpus()


def test_the_corpus_is_at_least_20_bugs_in_8_projects_pinned_by_sha256() -> None:
    assert len(CORPUS.bugs) >= 20
    assert len({b.project.name for b in CORPUS.bugs}) >= 8
    for project in CORPUS.projects:
        assert re.fullmatch(r"[0-9a-f]{64}", project.sha256)
        assert project.sdist.endswith(".tar.gz") and project.version in project.sdist
    for bug in CORPUS.bugs:
        assert bug.kind in KINDS and bug.fails
        task = bug.task()
        # A bug report: the failing tests and the symptom, never the fix.
        assert bug.fails[0] in task and bug.symptom in task
        assert bug.new.strip() not in task and bug.old.strip() not in task


def test_a_malformed_corpus_is_refused_with_a_clear_error() -> None:
    project = ('[[project]]\nname = "p"\nversion = "1"\nsdist = "p-1.tar.gz"\n'
               'sha256 = "{sha}"\ntest = "pytest"\ntest_paths = ["tests"]\n')  # fmt: skip
    bug = ('[[bug]]\nid = "p-1"\nproject = "p"\nfile = "{file}"\nkind = "operator"\n'
           'old = "a"\nnew = "b"\nsymptom = "s"\nfails = ["tests/t.py::t"]\n')  # fmt: skip
    with pytest.raises(UsageError, match="sha256"):
        load_corpus(project.format(sha="abc"))
    good = project.format(sha="0" * 64)
    with pytest.raises(UsageError, match="source file"):
        load_corpus(good + bug.format(file="tests/t.py"))  # a bug in the tests
    with pytest.raises(UsageError, match="source file"):
        load_corpus(good + bug.format(file="../x.py"))
    assert [b.id for b in load_corpus(good + bug.format(file="p.py")).bugs] == ["p-1"]
    with pytest.raises(UsageError, match="no bug"):
        CORPUS.select("nosuchbug")


def test_bugs_are_spread_over_the_projects() -> None:
    chosen = CORPUS.select("", 8)
    assert len({b.project.name for b in chosen}) == 8
    assert [b.id for b in CORPUS.select("toolz")] == [b.id for b in CORPUS.bugs
                                                      if b.project.name == "toolz"]  # fmt: skip


def test_every_mutation_applies_exactly_once_to_its_pinned_sdist() -> None:
    """Downloads the sdists once (pip checks their hashes; cached under ~/.cache)."""
    for project in CORPUS.projects:
        try:
            fetch_sdist(project)
        except BuildError as exc:
            require(False, f"could not download {project.sdist}: {exc}")
    for bug in CORPUS.bugs:
        source = (pristine(bug.project) / bug.file).read_text("utf-8")
        assert source.count(bug.old) == 1, bug.id
        assert mutate(source, bug) != source
    bug = CORPUS.bugs[0]
    with pytest.raises(BuildError, match="2 times"):
        mutate(bug.old + bug.old, bug)


def test_the_judge_takes_only_the_projects_own_source(tmp_path: Path) -> None:
    """A change to a test, a new conftest or a new file is no part of a fix."""
    bug = CORPUS.select("inflection-dasherize")[0]
    clean, repo_dir, agent = tmp_path / "clean", tmp_path / "repo", tmp_path / "agent"
    for root in (clean, repo_dir, agent):
        (root / "inflection").mkdir(parents=True)
        (root / "inflection" / "__init__.py").write_text("BUG\n")
        (root / "test_inflection.py").write_text("assert False\n")
    (agent / "inflection" / "__init__.py").write_text("FIXED\n")
    (agent / "test_inflection.py").write_text("pass\n")
    (agent / "conftest.py").write_text("collect_ignore = ['test_inflection.py']\n")
    repo = BugRepo(bug, repo_dir, clean)
    tree, dropped = fixed_tree(repo, agent, tmp_path / "judged")
    assert tree is not None
    assert (tree / "inflection" / "__init__.py").read_text() == "FIXED\n"
    assert (tree / "test_inflection.py").read_text() == "assert False\n"
    assert not (tree / "conftest.py").exists()
    assert sorted(dropped) == ["conftest.py", "test_inflection.py"]
    (agent / "inflection" / "__init__.py").write_text("BUG\n")
    assert fixed_tree(repo, agent, tmp_path / "again")[0] is None  # nothing to judge


def test_failing_tests_reads_pytests_summary() -> None:
    out = (
        "FAILED test_x.py::test_a[1-2] - AssertionError\n"
        "FAILED test_x.py::test_a[3-4] - AssertionError\n"
        "SUBFAILED(limit=9) tests/t.py::C::test_b - AssertionError\n"
        "ERROR tests/u.py::test_c - RuntimeError\n"
    )
    assert failing_tests(out) == ("test_x.py::test_a", "tests/t.py::C::test_b",
                                  "tests/u.py::test_c")  # fmt: skip


@pytest.mark.docker
def test_eval_code_fixes_a_real_bug_and_the_bug_is_checked_in_the_sandbox(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.code.test_setup_sandbox import local_indexes_only
    from tests.sandbox.conftest import engine_problem

    problem = engine_problem()
    require(not problem, problem)
    bug = CORPUS.select("inflection-dasherize")[0]
    try:
        fetch_sdist(bug.project)
    except BuildError as exc:
        if IN_CI:
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))
    local_indexes_only(monkeypatch)
    pattern = f"{paths().state}/code/*/tree/{bug.file}"
    fix = (
        "```python\nimport glob\n"
        f"[path] = glob.glob({pattern!r})\n"
        f"text = open(path).read()\nopen(path, 'w').write(text.replace({bug.new!r}, {bug.old!r}))\n"
        "print('fixed')\n```"
    )
    engine = ScriptedEngine.from_replies([fix, "dasherize turns underscores into dashes now."])
    monkeypatch.setattr(_execute, "select_engine", lambda *a, **kw: engine)
    results = paths().state / "codefix.jsonl"
    argv = ["eval", "code", "--bugs", bug.id, "--json", "--results", str(results)]
    done = CliRunner().invoke(cli, argv)
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    [row] = report["results"]
    assert row["fixed"] and row["verdict"] == "passed" and not row["error"], row
    assert row["turns"] == 2 and row["dropped"] == []
    # Where the time went: the model's replies (2), the setup and the test runs.
    assert row["calls"] == 2 and row["tests_s"] > 0 and row["setup_s"] > 0, row
    assert report["summary"][0]["fix_rate"] == 1.0
    assert "inflection-dasherize / jarvis native_openhands ..." in done.stderr
    # Resumable: the row is in the file, and a second run takes it from there.
    assert json.loads(results.read_text())["fixed"] is True
    again = CliRunner().invoke(cli, argv)
    assert "done before" in again.stderr and json.loads(again.stdout)["results"] == [row]
    # The bug, made afresh: the pristine suite passes; with the bug, exactly its test fails.
    import asyncio

    from jarvisd._config import load_config
    from jarvisd.evals.codefix._eval import bug_dir

    repo = build_bug(bug, bug_dir(bug))
    before, after = asyncio.run(check_bug(repo, load_config()))
    assert before.passed and before.setup_cached  # the run's environment, from the cache
    assert after.verdict == "failed" and after.failing == ("test_inflection.py::test_dasherize",)
    assert "No module named" not in after.output


def test_a_bug_run_again_counts_by_its_last_row_and_each_row_notes_load_and_tags(
    tmp_path: Path,
) -> None:
    """After a change to jarvis the bench runs bugs again (``--again``): the results
    file keeps both rows, the table counts the last, marks the one before; every row
    notes the machine's load at its start and the commit measured."""
    from benchmarks.bench_codefix import write_table
    from jarvisd.evals.codefix._eval import BugResult, RunConfig, latest, load_results, run_eval

    bug = CORPUS.select("toolz-tail")[0]
    rc = RunConfig(model="m")
    verdicts = iter([False, True])

    def runner(b: object, c: RunConfig) -> BugResult:
        return BugResult(bug.id, bug.project.name, c.name, c.model, fixed=next(verdicts))

    results = tmp_path / "codefix.jsonl"
    run_eval([bug], [rc], Config(), results=results, runner=runner, tags={"commit": "abc"})
    # Without --again the row the file holds stands: nothing runs.
    run_eval([bug], [rc], Config(), results=results, runner=runner)
    assert len(load_results(results)) == 1
    run_eval([bug], [rc], Config(), results=results, runner=runner, again=True)
    rows = load_results(results)
    assert [r["fixed"] for r in rows] == [False, True]
    assert rows[0]["commit"] == "abc" and all(isinstance(r["load"], float) for r in rows)
    assert [r["fixed"] for r in latest(rows)] == [True]
    report = write_table(tmp_path)
    assert [(s["n"], s["fixed"]) for s in report["summary"]] == [(1, 1)]
    table = (tmp_path / "codefix.md").read_text()
    assert " (superseded) |" in table and table.count("| toolz-tail |") == 2
