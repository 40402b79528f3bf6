"""The test command of a ``jarvis code`` run: run in the sandbox, its output kept
bounded, and judged honestly.

A run's tests end in one of three verdicts:

- ``passed``: the command ran and exited 0;
- ``failed``: the tests ran and some failed (the agent has something to fix);
- ``test_error``: the command could not run the tests at all, with the reason: a
  command not found (exit 127) or not executable (126), a test runner or dependency
  the sandbox lacks (``No module named ...``), a pytest run that collected or ran
  nothing (exit 2 to 5), a timeout or another stop. The agent cannot fix that by
  changing the code, and a person must not read it as a failing test.

Everything here reads what the sandboxed command printed, which is hostile: the output
is bounded in bytes while it is read, and a file it names is read only when it is a
regular file below the workspace reached without a symlink.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import WorkspaceError
from ._steps import walk_parent

if TYPE_CHECKING:
    from ..executors import CodeExecutor
    from ._store import Workspace

__all__ = [
    "MAX_TEST_OUTPUT",
    "TestRun",
    "judge",
    "named_files",
    "read_below",
    "run_test",
]

#: The most of a test command's output kept: its first bytes (where a runner that could
#: not start says so) and its tail (where failures are summed up).
MAX_TEST_OUTPUT = 8000
_HEAD_BYTES = 2000
#: The longest line read from the sandbox at once (a longer one comes in pieces).
_LINE_BYTES = 64 * 1024

PASSED, FAILED, TEST_ERROR = "passed", "failed", "test_error"

_PYTEST = re.compile(r"(^|[\s/])(py\.test|pytest)(\s|$)")
#: The interpreter's own word for ``python -m NAME`` when NAME is not installed.
_NO_RUNNER = re.compile(r"^\S*python[\w.]*: No module named (\S+)", re.MULTILINE)
_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
_NOT_FOUND = re.compile(r"^.*(?:not found|No such file or directory).*$", re.MULTILINE)
_COLLECTING = re.compile(r"^_* ?ERROR collecting (\S+)", re.MULTILINE)
_PYTEST_EXITS = {
    2: "pytest was interrupted: a collection error",
    3: "pytest stopped on an internal error",
    4: "pytest was called wrongly (a usage error)",
    5: "pytest collected no tests",
}


@dataclass(frozen=True, slots=True)
class TestRun:
    """The test command's result, in the sandbox."""

    __test__ = False  # not a pytest test class, whatever its name

    command: str
    exit_code: int
    output: str
    duration_s: float
    reason: str = ""  # how the sandbox stopped it: "timeout", "oom", ... or ""
    #: "passed", "failed" or "test_error" (see the module docstring).
    verdict: str = FAILED
    #: Why the tests could not run (a test_error), else "".
    error: str = ""

    @property
    def passed(self) -> bool:
        return self.verdict == PASSED

    @property
    def could_not_run(self) -> bool:
        return self.verdict == TEST_ERROR

    def describe(self) -> str:
        """One line for a person: "passed", "failed (exit 1)", "test_error: why"."""
        if self.verdict == PASSED:
            return PASSED
        if self.verdict == TEST_ERROR:
            return f"{TEST_ERROR}: {self.error}"
        return f"{FAILED} (exit {self.exit_code})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "exit_code": self.exit_code,
            "passed": self.passed,
            "verdict": self.verdict,
            "error": self.error,
            "reason": self.reason,
            "duration_s": self.duration_s,
            "output": self.output,
        }


def describe(test: object) -> str:
    """:meth:`TestRun.describe` for a stored test (a dict; older records have no
    verdict: theirs is passed or failed)."""
    if not isinstance(test, dict):
        return ""
    verdict = test.get("verdict") or (PASSED if test.get("passed") else FAILED)
    if verdict == PASSED:
        return PASSED
    if verdict == TEST_ERROR:
        return f"{TEST_ERROR}: {test.get('error')}"
    return f"{FAILED} (exit {test.get('exit_code')})"


def _module_in(workspace: Path, name: str) -> bool:
    """Whether the top-level module ``name`` is the project's own (a module missing
    there is the project's bug, not the sandbox's)."""
    top = name.split(".", 1)[0]
    return any(
        os.path.lexists(base / candidate)
        for base in (workspace, workspace / "src")
        for candidate in (top, f"{top}.py")
    )


def judge(
    command: str, exit_code: int, output: str, reason: str, timeout_s: float, workspace: Path
) -> tuple[str, str]:
    """The verdict of a test run and, for a test_error, why the tests could not run."""
    if reason == "timeout":
        return TEST_ERROR, f"the test command timed out after {timeout_s:g} s"
    if reason == "oom":
        return TEST_ERROR, "the test command ran out of memory (see [sandbox] memory)"
    if reason:
        return TEST_ERROR, f"the test command was stopped ({reason})"
    if exit_code == 0:
        return PASSED, ""
    if exit_code == 127:
        said = _NOT_FOUND.search(output)
        detail = said.group(0).strip()[:200] if said else "exit 127"
        return TEST_ERROR, f"command not found in the sandbox ({detail})"
    if exit_code == 126:
        return TEST_ERROR, "the test command could not be executed (exit 126: not executable)"
    runner = _NO_RUNNER.search(output)
    if runner:
        return TEST_ERROR, f"No module named {runner.group(1)}: it is not installed in the sandbox"
    pytest = _PYTEST.search(command) is not None
    if pytest and exit_code in _PYTEST_EXITS:
        why = _PYTEST_EXITS[exit_code]
        collecting = _COLLECTING.search(output)
        if exit_code == 2 and collecting:
            why += f" in {collecting.group(1)[:200]}"
        return TEST_ERROR, f"{why} (exit {exit_code})"
    if not pytest:
        # Outside pytest (which reports an import error in a test as a failure of that
        # test, and one at collection with exit 2), a module that is not the project's
        # and cannot be imported is a dependency the sandbox lacks.
        for missing in _NO_MODULE.findall(output):
            if not _module_in(workspace, missing):
                return (
                    TEST_ERROR,
                    f"No module named {missing!r}: it is not installed in the sandbox",
                )
    return FAILED, ""


class _Bounded:
    """The head and the tail of a stream, never more than their sizes in memory."""

    def __init__(self, head: int, tail: int) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self._head_size, self._tail_size = head, tail
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self._head_size - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        over = len(self.tail) - self._tail_size
        if over > 0:
            del self.tail[:over]
            self.dropped += over

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if self.dropped:
            return f"{head}\n[... {self.dropped} bytes of output left out ...]\n{tail}"
        return head + tail


async def run_test(executor: CodeExecutor, ws: Workspace, limit_s: float) -> TestRun:
    """Run the workspace's test command in the sandbox (the workspace read-only)."""
    from ..executors import ExecRequest
    from ._workspace import remove_bytecode

    argv = ["/bin/sh", "-c", 'cd "$1" && exec /bin/sh -c "$2"', "sh", ws.path, ws.test]
    # Compiled Python is never part of a change, so never reviewed: what the agent left
    # there must not stand in for the source the test imports (the workspace is a copy).
    remove_bytecode(Path(ws.path))
    request = ExecRequest(
        argv=argv, timeout=limit_s, mounts=(ws.path,), env={"PYTHONDONTWRITEBYTECODE": "1"}
    )
    started = time.perf_counter()
    kept = _Bounded(_HEAD_BYTES, MAX_TEST_OUTPUT - _HEAD_BYTES)
    channel = await executor.open(request)
    try:
        await channel.close_stdin()
        while line := await channel.readline(_LINE_BYTES):
            kept.add(line)
        result = await channel.wait()
    except BaseException:
        await channel.stop("cancelled")
        raise
    kept.add(result.stdout.encode())
    kept.add(result.stderr.encode())
    output = kept.text()
    verdict, error = judge(ws.test, result.exit_code, output, result.reason, limit_s, Path(ws.path))
    return TestRun(
        ws.test,
        result.exit_code,
        output,
        round(time.perf_counter() - started, 3),
        result.reason,
        verdict,
        error,
    )


# A traceback's frame (File "x.py", line 3), pytest's location (x.py:3: or x.py::test),
# or a path ending in .py anywhere in the text (a task naming the file to fix).
_PY_PATH = re.compile(r"""File "([^"\n]+\.py)"|([\w./-]*\w\.py)\b""")


def named_files(
    texts: list[str], workspace: Path, *, max_files: int, max_bytes: int
) -> list[tuple[str, str]]:
    """The workspace's Python files that ``texts`` name (in order, each once), as
    (path relative to the workspace, text), at most ``max_files`` and ``max_bytes``
    together (a longer file is cut, and says so). A name that leaves the workspace, a
    symlink on the way, or anything but a regular file is skipped: what the tests
    printed is the sandbox's, and must not make jarvis read a host file."""
    root = os.path.realpath(workspace)
    found: list[str] = []
    for text in texts:
        for match in _PY_PATH.finditer(text):
            name = match.group(1) or match.group(2)
            rel = _relative(name, root)
            if rel is not None and rel not in found:
                found.append(rel)
    out: list[tuple[str, str]] = []
    left = max_bytes
    for rel in found:
        if len(out) >= max_files or left <= 0:
            break
        data = read_below(root, rel, left + 1)
        if data is None:
            continue
        text = data[:left].decode("utf-8", "replace")
        if len(data) > left:
            text += "\n[... the rest of the file is left out ...]"
        left -= min(len(data), left)
        out.append((rel, text))
    return out


def _relative(name: str, root: str) -> str | None:
    """``name`` as a path relative to the workspace, or None when it is not below it."""
    if name.startswith("/"):
        if not name.startswith(root + "/"):
            return None
        name = name[len(root) + 1 :]
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def read_below(root: str, rel: str, limit: int) -> bytes | None:
    """At most ``limit`` bytes of the regular file ``rel`` below ``root``, every
    component reached without following a symlink; None when it is not such a file."""
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        parent = walk_parent(top, rel, create=False)
    except WorkspaceError:  # a link or a file on the way: not the project's file to show
        return None
    finally:
        os.close(top)
    if parent is None:
        return None
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(rel.rsplit("/", 1)[-1], flags, dir_fd=parent)
    except OSError:
        return None
    finally:
        os.close(parent)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)
