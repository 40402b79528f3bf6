"""The project's whole suite, in the sandbox, as ``jarvis code --test`` runs it: the
same setup (a venv made in the sandbox, cached by the dependency files and the
project's path), the same test runner (the tree read-only, its source on PYTHONPATH).

A bug is checked twice when it is made (the pristine tree passes; with the bug, the
tests the corpus names fail, and no other), and a fix once (the whole suite passes).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ._build import BugRepo, BuildError

if TYPE_CHECKING:
    from ..._config import Config
    from ...code._testrun import TestRun
    from ._corpus import Bug

__all__ = ["SuiteResult", "check_bug", "failing_tests", "fixed_tree", "run_suite"]

#: A failure's line in pytest's short summary: FAILED, ERROR, SUBFAILED(...) and a test id.
_SUMMARY = re.compile(r"^(?:FAILED|ERROR|SUBFAIL\S*)\s+.*?([\w/.-]+\.py::[\w:]+)", re.M)
#: The check's runs print no tracebacks: the summary must fit the kept output.
CHECK_FLAGS = " --tb=no -rfE"


@dataclass(frozen=True, slots=True)
class SuiteResult:
    passed: bool
    verdict: str  # passed, failed, test_error
    failing: tuple[str, ...]  # the failing test functions (parameters dropped)
    duration_s: float
    setup_cached: bool
    output: str


def failing_tests(output: str) -> tuple[str, ...]:
    """The test functions pytest's short summary names as failed, sorted, once each."""
    return tuple(sorted({m.group(1) for m in _SUMMARY.finditer(output)}))


async def run_suite(
    path: Path, test: str, config: Config, project: str, say: object = None
) -> SuiteResult:
    """``test`` on the tree at ``path``, in the sandbox, with the project's setup
    (cached under ``project``, the path ``jarvis code`` was given)."""
    from ...code._job import _code_config
    from ...code._setup import plan_setup, prepare_toolchain, with_toolchain
    from ...code._store import Workspace
    from ...code._testrun import run_test
    from ...sandbox import executor_for_backend

    files = sum(1 for _ in path.rglob("*"))
    ws = Workspace(id="codefix", source=project, kind="copy", path=str(path), git_dir="",
                   branch="", base="", test=test, files=files)  # fmt: skip
    code_config = _code_config(config, ws)
    executor = executor_for_backend(config.sandbox.backend, code_config)
    cached = False
    try:
        plan = plan_setup(str(path))
        if plan is not None:
            toolchain = await prepare_toolchain(plan, str(path), code_config, executor,
                                                project=project)  # fmt: skip
            cached = toolchain.cached
            executor = with_toolchain(executor, toolchain, str(path))
        result: TestRun = await run_test(executor, ws, config.sandbox.timeout)
    finally:
        close = getattr(executor, "close", None)
        if close is not None:
            close()
    return SuiteResult(result.passed, result.verdict, failing_tests(result.output),
                       result.duration_s, cached, result.output)  # fmt: skip


async def check_bug(repo: BugRepo, config: Config) -> tuple[SuiteResult, SuiteResult]:
    """The pristine suite and the suite with the bug, in the sandbox; BuildError unless
    the first passes and the second fails exactly the corpus's tests."""
    bug = repo.bug
    command = bug.project.test + CHECK_FLAGS
    with tempfile.TemporaryDirectory(prefix="codefix-pristine-") as tmp:
        clean = Path(tmp) / "tree"
        shutil.copytree(repo.pristine, clean, ignore=shutil.ignore_patterns(".complete"))
        before = await run_suite(clean, command, config, str(repo.path))
    if not before.passed:
        raise BuildError(f"{bug.id}: {bug.project.requirement}'s own suite does not pass in "
                         f"the sandbox ({before.verdict}): {before.output[-600:]}")  # fmt: skip
    after = await run_suite(repo.path, command, config, str(repo.path))
    if after.verdict != "failed" or set(after.failing) != set(bug.fails):
        extra = sorted(set(after.failing) - set(bug.fails))[:5]
        missing = sorted(set(bug.fails) - set(after.failing))[:5]
        raise BuildError(f"{bug.id}: with the bug the suite is {after.verdict}; failing but "
                         f"not named: {extra}; named but not failing: {missing}")  # fmt: skip
    return before, after


def fixed_tree(repo: BugRepo, diff: str, dest: Path) -> tuple[Path, list[str]]:
    """The bug's tree with ``diff``'s changes to the project's own source files applied
    at ``dest``; the files it left out (tests, conftest, new files) are returned: a fix
    is judged by the project's tests as released, which it may not change."""
    bug: Bug = repo.bug
    shutil.copytree(repo.path, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    kept, dropped = _split(diff, repo, bug)
    if kept.strip():
        done = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=dest,
                              input=kept, capture_output=True, text=True, timeout=60)  # fmt: skip
        if done.returncode != 0:
            raise BuildError(f"{bug.id}: the change does not apply: {done.stderr.strip()[-300:]}")
    return dest, dropped


_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


def _split(diff: str, repo: BugRepo, bug: Bug) -> tuple[str, list[str]]:
    """``diff`` cut into what a fix may change (existing source files) and the names of
    the rest."""
    parts = _FILE.split(diff)
    kept: list[str] = []
    dropped: list[str] = []
    # parts: [head, a, b, body, a, b, body, ...]
    for i in range(1, len(parts) - 2, 3):
        old, new, body = parts[i], parts[i + 1], parts[i + 2]
        allowed = (
            old == new
            and not bug.project.is_test_path(new)
            and (repo.pristine / new).is_file()
            and "\nnew file mode" not in body[:200]
            and "\ndeleted file mode" not in body[:200]
        )
        if allowed:
            kept.append(f"diff --git a/{old} b/{new}{body}")
        else:
            dropped.append(new)
    return "".join(kept), dropped
