"""Making a workspace, recording what the agent changed in it, and removing it.

A git project (PATH is the top of a repository with at least one commit) gets a
``git worktree`` on a new branch ``jarvis/code-ID`` at HEAD, filled with the project's
working files as they are now (tracked and untracked, not ignored): its uncommitted
changes come along. Any other directory is copied, with a private git directory beside
the copy for its history. Either way the workspace's state is committed on the branch
as ``base`` before the agent runs, and as ``result`` after: the change to review is
``base..result``, immutable objects whatever happens to the files later.

Layout: ``$JARVIS_STATE_DIR/code/ID/`` holds ``tree/`` (the work tree, the only thing
the sandbox sees), ``git/`` (a copy's repository), ``left-out`` (every path left out,
NUL-separated) and the index files jarvis uses. Host-side git never trusts the tree:
see ``_git``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .._errors import UsageError, WorkspaceError
from ._copy import NameFilter, copy_tree
from ._git import Git, git_output
from ._store import CodeStore, Workspace, new_workspace_id

__all__ = [
    "CACHE_PATTERNS",
    "MAX_DIFF_BYTES",
    "Change",
    "discard",
    "prepare",
    "snapshot",
    "workspace_root",
]

#: What test runs leave behind, never part of a change.
CACHE_PATTERNS = ("__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache", ".ruff_cache")
#: The most of a diff that is stored and shown (the files list is always complete).
MAX_DIFF_BYTES = 2 * 1024 * 1024
_LEFT_OUT = "left-out"


def workspace_root(state_dir: Path, ws_id: str) -> Path:
    return state_dir / "code" / ws_id


def _names() -> NameFilter:
    from ..sandbox import BLOCKED_PATTERNS

    return NameFilter(BLOCKED_PATTERNS)


def _sandbox_owner() -> tuple[int, int] | None:
    """Who must own the copies: the sandbox user when jarvis runs as root (the sandbox
    then runs as that user); else jarvis's own user, which the sandbox runs as."""
    if os.getuid() != 0:
        return None
    from ..sandbox._policy import SANDBOX_GID, SANDBOX_UID

    return SANDBOX_UID, SANDBOX_GID


def _split(output: bytes) -> list[str]:
    return [os.fsdecode(p) for p in output.split(b"\0") if p]


def _repository_head(source: Path) -> str:
    """HEAD's commit when ``source`` is the top of a git repository with a commit,
    else "" (it is then copied)."""
    top = git_output(["rev-parse", "--show-toplevel"], cwd=source, check=False)
    if top.returncode != 0 or Path(os.fsdecode(top.stdout.strip())).resolve() != source:
        return ""
    head = git_output(["rev-parse", "--verify", "-q", "HEAD^{commit}"], cwd=source, check=False)
    return head.stdout.decode().strip() if head.returncode == 0 else ""


def _pathspecs(left_out: Iterable[str]) -> bytes:
    """Everything in the tree except caches, blocked names (the agent may have written
    some) and what was left out: a change to those is never carried back."""
    from ..sandbox import BLOCKED_PATTERNS

    specs = ["."]
    for pattern in (*BLOCKED_PATTERNS, *CACHE_PATTERNS):
        specs += [f":(exclude,glob,icase)**/{pattern}", f":(exclude,glob,icase)**/{pattern}/**"]
    specs += [f":(exclude,literal){path}" for path in left_out]
    return b"\0".join(os.fsencode(s) for s in specs) + b"\0"


def _commit(git: Git, index: Path, left_out: Iterable[str], message: str, *parents: str) -> str:
    """Stage the work tree (as ``_pathspecs`` says) into ``index`` and commit it."""
    git.run("add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul", index=index,
            stdin=_pathspecs(left_out))  # fmt: skip
    tree = git.text("write-tree", index=index)
    if parents and tree == git.text("rev-parse", f"{parents[0]}^{{tree}}"):
        return parents[0]  # nothing changed
    args = ["commit-tree", tree, "-m", message]
    for parent in parents:
        args += ["-p", parent]
    return git.text(*args, identity=True)


def prepare(
    source: str,
    *,
    store: CodeStore,
    state_dir: Path,
    task: str = "",
    agent: str = "",
    test: str = "",
    respect_gitignore: bool = False,
) -> Workspace:
    """Make a workspace of the project at ``source`` and record it (state "ready")."""
    started = time.perf_counter()
    path = Path(os.path.abspath(os.path.expanduser(source)))
    try:
        real = path.resolve(strict=True)
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror}") from exc
    if not real.is_dir():
        raise UsageError(f"{path} is not a directory")
    workspaces = (state_dir / "code").resolve()
    if workspaces.is_relative_to(real) or real.is_relative_to(workspaces):
        # A workspace inside the project would be copied into itself as it grows.
        raise UsageError(
            f"{path} holds jarvis's workspaces ({workspaces}): name a project directory"
        )
    ws_id = new_workspace_id()
    root = workspace_root(state_dir, ws_id)
    root.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    root.mkdir(mode=0o700)
    root = root.resolve()
    tree = root / "tree"
    branch = f"jarvis/code-{ws_id}"
    try:
        head = _repository_head(real)
        if head:
            git_output(["worktree", "add", "--no-checkout", "-q", "-b", branch, str(tree), head],
                       cwd=real)  # fmt: skip
            git_dir = Path(git_output(["rev-parse", "--absolute-git-dir"], cwd=tree).stdout
                           .decode().strip())  # fmt: skip
            listed = git_output(["ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=real).stdout  # fmt: skip
            only: set[str] | None = set(_split(listed))
        else:
            git_dir = root / "git"
            git_output(["init", "-q", "--bare", str(git_dir)])
            tree.mkdir()
            only = None
            if respect_gitignore:
                listed = Git(git_dir, real).run("ls-files", "-z", "--others", "--exclude-standard")
                only = set(_split(listed))
        owner = _sandbox_owner()
        os.chmod(tree, 0o770)
        if owner is not None:
            os.chown(tree, *owner)
        report = copy_tree(str(real), str(tree), _names(), only=only, owner=owner)
        if only is not None:  # what is ignored, listed so nobody wonders where it went
            ignored_args = ["ls-files", "-z", "--others", "--ignored", "--exclude-standard",
                            "--directory"]  # fmt: skip
            if head:
                ignored = git_output(ignored_args, cwd=real).stdout
            else:
                ignored = Git(git_dir, real).run(*ignored_args)
            for name in _split(ignored):
                report.leave_out(name.rstrip("/"), "ignored by git")
        left = report.all_left_out
        (root / _LEFT_OUT).write_bytes(b"".join(os.fsencode(p) + b"\0" for p in left))
        git = Git(git_dir, tree)
        index = root / "index.base"
        parents = [head] if head else []
        if head:
            git.run("read-tree", head, index=index)
        base = _commit(git, index, left, f"jarvis code {ws_id}: the project as given", *parents)
        if not head or base != head:
            git.run("update-ref", f"refs/heads/{branch}", base)
        if head:  # for `git status` in the worktree
            git.run("read-tree", base)
    except BaseException:
        _remove(root, tree, real if _is_worktree(tree) else None, branch)
        raise
    ws = Workspace(
        id=ws_id, source=str(real), kind="git" if head else "copy", path=str(tree),
        git_dir=str(git_dir), branch=branch, base=base, task=task, agent=agent, test=test,
        setup_s=round(time.perf_counter() - started, 3), files=report.files,
        left_out=tuple(x.to_dict() for x in report.left_out),
        more_left_out=report.more_left_out,
    )  # fmt: skip
    return store.put(ws)


def _is_worktree(tree: Path) -> bool:
    return os.path.lexists(tree / ".git")


@dataclass(frozen=True, slots=True)
class Change:
    """What the agent changed: the commit, the files (status A, M, D, T), the diff."""

    result: str
    files: tuple[tuple[str, str], ...]
    diff: str
    diff_truncated: bool

    @property
    def changed(self) -> bool:
        return bool(self.files)


def snapshot(ws: Workspace) -> Change:
    """Commit the work tree as it is now (the result) on the workspace's branch, and
    say what changed since ``base``."""
    root = Path(ws.path).parent
    git = Git(Path(ws.git_dir), Path(ws.path))
    left = _split((root / _LEFT_OUT).read_bytes()) if (root / _LEFT_OUT).exists() else []
    index = root / "index.result"
    with contextlib.suppress(FileNotFoundError):
        index.unlink()
    git.run("read-tree", ws.base, index=index)
    left = [*left, *_nested_repositories(Path(ws.path))]
    result = _commit(git, index, left, f"jarvis code {ws.id}: {ws.task[:200]}", ws.base)
    if result != ws.base:
        git.run("update-ref", f"refs/heads/{ws.branch}", result)
        if ws.kind == "git":
            git.run("read-tree", result)
    names = git.run("diff", "--name-status", "-z", "--no-renames", ws.base, result)
    fields = _split(names)
    files = tuple((fields[i], fields[i + 1]) for i in range(0, len(fields) - 1, 2))
    diff, truncated = _bounded_diff(git, ws.base, result)
    return Change(result, files, diff, truncated)


def _nested_repositories(tree: Path) -> list[str]:
    """Directories below ``tree`` that hold a ``.git`` (an agent may run ``git init``):
    git would record them as submodules, or refuse them, so they are no part of a
    change. The walk follows no symlink."""
    found = []
    for dirpath, dirs, files in os.walk(tree):
        if dirpath != str(tree) and (".git" in dirs or ".git" in files):
            found.append(os.path.relpath(dirpath, tree))
            dirs.clear()
        elif dirpath == str(tree) and ".git" in dirs:
            dirs.remove(".git")
    return found


def _bounded_diff(git: Git, base: str, result: str) -> tuple[str, bool]:
    data, truncated = git.head("diff", "--no-ext-diff", "--no-textconv", "--no-color", "--binary",
                               base, result, limit=MAX_DIFF_BYTES)  # fmt: skip
    return data.decode("utf-8", "replace"), truncated


def discard(ws: Workspace, store: CodeStore, state_dir: Path, *, forget: bool = True) -> None:
    """Remove the workspace: its tree, its worktree entry and branch, its files; and,
    with ``forget``, its record."""
    root = workspace_root(state_dir, ws.id)
    source = Path(ws.source) if ws.kind == "git" else None
    _remove(root, Path(ws.path), source, ws.branch, Path(ws.git_dir))
    if forget:
        store.delete(ws.id)


def _remove(
    root: Path, tree: Path, source: Path | None, branch: str, git_dir: Path | None = None
) -> None:
    # rmtree never follows a symlink out of the tree (it works through descriptors).
    shutil.rmtree(tree, ignore_errors=True)
    if source is not None and source.is_dir():
        if git_dir is not None and git_dir.parent.name == "worktrees":
            shutil.rmtree(git_dir, ignore_errors=True)
        # Forget worktrees whose directories are gone (this one), then the branch.
        git_output(["worktree", "prune"], cwd=source, check=False)
        git_output(["update-ref", "-d", f"refs/heads/{branch}"], cwd=source, check=False)
    shutil.rmtree(root, ignore_errors=True)
    if os.path.lexists(root):
        raise WorkspaceError(f"could not remove {root} entirely")
