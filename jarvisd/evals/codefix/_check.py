"""The project's whole suite, in the sandbox, as ``jarvis code --test`` runs it: the
same setup (a venv made in the sandbox, cached by the dependency files and the
project's path), the same test runner (the tree read-only, its source on PYTHONPATH).

A bug is checked twice when it is made (the pristine tree passes; with the bug, the
tests the corpus names fail, and no other), and a fix once (the whole suite passes).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ._build import BugRepo, BuildError

if TYPE_CHECKING:
    from ..._config import Config
    from ...code._testrun import TestRun

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

    files = sum(1 for _ in path.rglob("*"))  # noqa: ASYNC240 - before any await
    ws = Workspace(
        id="codefix",
        source=project,
        kind="copy",
        path=str(path),
        git_dir="",
        branch="",
        base="",
        test=test,
        files=files,
    )
    code_config = _code_config(config, ws)
    executor = executor_for_backend(config.sandbox.backend, code_config)
    cached = False
    try:
        plan = plan_setup(str(path))
        if plan is not None:
            toolchain = await prepare_toolchain(
                plan, str(path), code_config, executor, project=project
            )
            cached = toolchain.cached
            executor = with_toolchain(executor, toolchain, str(path))
        result: TestRun = await run_test(executor, ws, config.sandbox.timeout)
    finally:
        close = getattr(executor, "close", None)
        if close is not None:
            close()
    return SuiteResult(
        result.passed,
        result.verdict,
        failing_tests(result.output),
        result.duration_s,
        cached,
        result.output,
    )


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
        raise BuildError(
            f"{bug.id}: {bug.project.requirement}'s own suite does not pass in "
            f"the sandbox ({before.verdict}): {before.output[-600:]}"
        )
    after = await run_suite(repo.path, command, config, str(repo.path))
    if after.verdict != "failed" or set(after.failing) != set(bug.fails):
        extra = sorted(set(after.failing) - set(bug.fails))[:5]
        missing = sorted(set(bug.fails) - set(after.failing))[:5]
        raise BuildError(
            f"{bug.id}: with the bug the suite is {after.verdict}; failing but "
            f"not named: {extra}; named but not failing: {missing}"
        )
    return before, after


def fixed_tree(repo: BugRepo, tree: Path, dest: Path) -> tuple[Path | None, list[str]]:
    """The bug's tree at ``dest`` with ``tree``'s versions of the project's own source
    files (those of the sdist, tests and conftests excepted); None when none differs.
    Also the names of the changes left out (tests, new files): a fix is judged by the
    project's tests as released, which it may not change."""
    shutil.copytree(repo.path, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    project = repo.bug.project
    changed = False
    dropped: list[str] = []
    for path in sorted(tree.rglob("*")):
        rel = path.relative_to(tree).as_posix()
        if (
            rel.split("/", 1)[0] == ".git"
            or "__pycache__" in rel.split("/")
            or rel.endswith(".pyc")
            or path.is_dir()
        ):
            continue
        original = repo.path / rel
        if path.is_symlink() or not original.is_file():
            dropped.append(rel)  # a new file (or a link): never part of a judged fix
            continue
        if _same(path, original):
            continue
        if project.is_test_path(rel) or not (repo.pristine / rel).is_file():
            dropped.append(rel)
            continue
        shutil.copyfile(path, dest / rel)
        changed = True
    return (dest if changed else None), dropped


def _same(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()
    except OSError:
        return False
