"""Running git for a workspace, without trusting anything inside the workspace.

A workspace comes back from the sandbox written by a program jarvis does not trust. It
could have replaced the worktree's ``.git`` file with one that points at a repository
of its own making, whose config runs commands (``core.fsmonitor``, hooks, filters). So
git is never left to discover a repository here: every call names the git directory
and the work tree explicitly, turns hooks and fsmonitor off, and leaves the caller's
``GIT_*`` environment out. Diffs run with ``--no-ext-diff --no-textconv``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._errors import WorkspaceError

__all__ = ["Git", "git_output"]

#: Settings forced on every call (see the module docstring).
_SAFE = (
    "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
    "-c", "core.untrackedCache=false", "-c", "commit.gpgSign=false",
    "-c", "diff.external=", "-c", "submodule.recurse=false",
)  # fmt: skip
#: How much of git's error output a message quotes.
_STDERR_CHARS = 400
#: Identity of the commits jarvis makes on its own branch.
IDENTITY = {
    "GIT_AUTHOR_NAME": "jarvis code",
    "GIT_AUTHOR_EMAIL": "jarvis@localhost",
    "GIT_COMMITTER_NAME": "jarvis code",
    "GIT_COMMITTER_EMAIL": "jarvis@localhost",
}


def _environment(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(LC_ALL="C", GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0")
    env.update(extra)
    return env


def git_output(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """``git ARGS`` with the safe settings; WorkspaceError (git's words) when it fails
    and ``check``, or when git is not installed."""
    argv = ["git", *_SAFE, *args]
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=_environment(env or {}), input=stdin, capture_output=True,
            check=False,
        )  # fmt: skip
    except FileNotFoundError as exc:
        raise WorkspaceError("git is not installed (jarvis code needs it)") from exc
    if check and done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip()[-_STDERR_CHARS:]
        raise WorkspaceError(f"git {args[0]} failed: {said or f'exit {done.returncode}'}")
    return done


@dataclass(frozen=True, slots=True)
class Git:
    """One repository (``git_dir``) with one work tree, named explicitly every time."""

    git_dir: Path
    work_tree: Path

    def run(
        self,
        *args: str,
        index: Path | None = None,
        stdin: bytes | None = None,
        check: bool = True,
        identity: bool = False,
    ) -> bytes:
        env = {"GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.work_tree)}
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        if identity:
            env.update(IDENTITY)
        done = git_output(args, cwd=self.work_tree, env=env, stdin=stdin, check=check)
        return done.stdout

    def head(self, *args: str, limit: int) -> tuple[bytes, bool]:
        """The first ``limit`` bytes of ``git ARGS``'s output, and whether there was
        more (git is stopped then: a diff may be as large as what the agent wrote)."""
        env = _environment({"GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.work_tree)})
        with subprocess.Popen(["git", *_SAFE, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=env, cwd=self.work_tree) as proc:  # fmt: skip
            assert proc.stdout is not None
            data = proc.stdout.read(limit + 1)
            proc.kill()
        return data[:limit], len(data) > limit

    def text(self, *args: str, **kw: object) -> str:
        return self.run(*args, **kw).decode("utf-8", "replace").strip()  # type: ignore[arg-type]
