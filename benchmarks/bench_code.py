"""``jarvis code`` workspace setup on a 50,000-file git repository, against a plain
``git worktree add`` of the same repository (which checks the files out itself).

Ours: ``jarvisd.code.prepare``: a private repository borrowing the project's objects,
every tracked and untracked, not ignored file copied through descriptors with blocked
names and virtual environments left out, the ownership and modes the sandbox needs, and
the base commit (every file read by jarvis and named; only new content handed to git). Both are interleaved; each workspace is removed before the next. An
informational row: the issue asks for the time to be reported, with no target.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.harness import BenchEnv, Row

FILES = 50_000
_PER_DIR = 500


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.com"}  # fmt: skip
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def make_repository(root: Path, files: int) -> Path:
    """A git repository of ``files`` small files (plus a ``calc.py`` with a bug),
    committed, in directories of 500: one ``git fast-import`` stream, then a checkout
    (git writes the files: far faster than Python on a loaded machine)."""
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    parts = [b"commit refs/heads/main\ncommitter b <b@example.com> 0 +0000\ndata 10\nmany files\n"]
    entries = [(f"pkg{i // _PER_DIR:03d}/m{i:05d}.py", f"VALUE = {i}\n") for i in range(files)]
    entries.append(("calc.py", "def add(a, b):\n    return a - b\n"))
    for path, text in entries:
        data = text.encode()
        parts.append(b"M 100644 inline %s\ndata %d\n%s\n" % (path.encode(), len(data), data))
    subprocess.run(["git", "fast-import", "--quiet"], cwd=root, input=b"".join(parts),
                   check=True, capture_output=True)  # fmt: skip
    _git(root, "checkout", "-q", "-f", "main")
    return root


def run(env: BenchEnv) -> list[Row]:
    from jarvisd.code import CodeStore, discard, prepare

    runs = env.runs(3, 1)
    files = 500 if env.smoke else FILES
    project = make_repository(env.tmp / "code-bench" / "project", files)
    state = env.tmp / "code-bench" / "state"
    store = CodeStore(state / "code.db")
    ours: list[float] = []
    base: list[float] = []
    for i in range(runs):
        start = time.perf_counter()
        ws = prepare(str(project), store=store, state_dir=state, task="bench")
        ours.append(time.perf_counter() - start)
        discard(ws, store, state)
        plain = env.tmp / "code-bench" / f"plain{i}"
        start = time.perf_counter()
        _git(project, "worktree", "add", "-q", "-b", f"plain{i}", str(plain))
        base.append(time.perf_counter() - start)
        shutil.rmtree(plain)
        _git(project, "worktree", "prune")
        _git(project, "branch", "-D", f"plain{i}")
    store.close()
    shutil.rmtree(env.tmp / "code-bench", ignore_errors=True)
    return [
        Row(
            f"`jarvis code` workspace of a {files:,}-file repository",
            statistics.median(ours),
            "s",
            baseline=statistics.median(base),
            baseline_name="plain `git worktree add` (with checkout) of the same repository",
            passed=None,
            notes=f"median of {runs}, interleaved; copy through descriptors, blocked names "
            "left out, sandbox ownership, base commit",
        )
    ]
