"""Making a workspace, recording what the agent changed in it, and removing it.

The workspace is a copy of the project's files: for a git project (PATH is the top of
a repository with at least one commit) its working files as they are now (tracked and
untracked, not ignored), uncommitted changes included; any other directory whole. Its
history is kept in a private bare repository beside the copy, never in the project:
for a git project it borrows the project's objects (``objects/info/alternates``), so
HEAD is the parent of ``base`` and nothing is written into the project's ``.git``. The
workspace's state is committed on branch ``jarvis/code-ID`` of that repository as
``base`` before the agent runs, and as ``result`` after: the change to review is
``base..result``, immutable objects whatever happens to the files later.

Layout: ``$JARVIS_STATE_DIR/code/ID/`` holds ``tree/`` (the work tree, the only thing
the sandbox sees; it holds no ``.git``), ``git/`` (the private repository),
``left-out`` (every path left out, NUL-separated) and ``manifest.json`` (what was
recorded, to tell what the agent touched without reading the rest). Host-side git never
reads the tree: jarvis reads the files and hands git their bytes (see ``_record`` and
``_git``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .._errors import UsageError, WorkspaceError
from ..sandbox._copy import CopyReport, NameFilter, copy_tree
from ._git import Git, git_output
from ._record import Limits, load_manifest, record, save_manifest
from ._store import CodeStore, Workspace, new_workspace_id

__all__ = [
    "CACHE_PATTERNS",
    "MAX_DIFF_BYTES",
    "Change",
    "discard",
    "prepare",
    "remove_bytecode",
    "remove_git_entries",
    "snapshot",
    "workspace_root",
]

#: What test runs leave behind, never part of a change.
CACHE_PATTERNS = ("__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache", ".ruff_cache")
#: The most of a diff that is stored and shown (the files list is always complete).
MAX_DIFF_BYTES = 2 * 1024 * 1024
_LEFT_OUT = "left-out"
_MANIFEST = "manifest.json"
_FORMAT = "object-format"


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


def _project_repository(source: Path) -> tuple[str, Path | None, str]:
    """HEAD's commit, the object directory and the object format (``sha1``, ``sha256``)
    when ``source`` is the top of a git repository with a commit, else ("", None,
    "sha1") (it is then copied)."""
    top = _project_git(source, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0 or Path(os.fsdecode(top.stdout.strip())).resolve() != source:
        return "", None, "sha1"
    head = _project_git(source, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
    if head.returncode != 0:
        return "", None, "sha1"
    found = (
        _project_git(
            source,
            "rev-parse",
            "--path-format=absolute",
            "--git-common-dir",
            "--show-object-format",
        )
        .stdout.decode()
        .split("\n")
    )
    return head.stdout.decode().strip(), Path(found[0]) / "objects", found[1].strip() or "sha1"


def _project_git(
    project: Path, *args: str, git_dir: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    """``git ARGS`` reading the user's project (its own repository, or ``git_dir`` with
    the project as work tree): only its HEAD and the list of its files, which runs
    nothing, with the safe settings. Its owner may be another user (jarvis as root):
    its files are only read. The user's own ignore file still applies (a file the user
    ignores everywhere stays out of the sandbox)."""
    env = {} if git_dir is None else {"GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(project)}
    options = ["-c", f"safe.directory={project}"]
    excludes = _user_excludes_file()
    if excludes:
        options += ["-c", f"core.excludesFile={excludes}"]
    return git_output([*options, *args], cwd=project, env=env, check=check)


def _user_excludes_file() -> str:
    """The user's global ignore file (``core.excludesFile``, else git's default place),
    or "". Reading a config value runs nothing."""
    home = os.path.expanduser("~")
    said = subprocess.run(
        ["git", "config", "--global", "--path", "--get", "core.excludesFile"],
        capture_output=True,
        check=False,
        cwd=home,
        env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    )
    if said.returncode == 0 and said.stdout.strip():
        return os.fsdecode(said.stdout.strip())
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    default = os.path.join(xdg, "git", "ignore")
    return default if os.path.isfile(default) else ""


def _private_repository(git_dir: Path, objects: Path | None, algorithm: str) -> None:
    """The workspace's own bare repository, borrowing the project's objects (nothing is
    ever written into the project's ``.git``)."""
    git_output(
        ["init", "-q", "--bare", "--template=", f"--object-format={algorithm}", str(git_dir)]
    )
    if objects is not None:
        info = git_dir / "objects" / "info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "alternates").write_bytes(os.fsencode(objects) + b"\n")


class _Excluded:
    """What is never part of a change: caches, blocked names (the agent may have
    written some), what was left out of the workspace, nested repositories, and any
    ``.git``. A path is excluded when it or a directory above it is."""

    def __init__(self, left_out: Iterable[str]) -> None:
        from ..sandbox import BLOCKED_PATTERNS

        self._names = NameFilter((*BLOCKED_PATTERNS, *CACHE_PATTERNS))
        self._paths = set(left_out)

    def __call__(self, path: str, is_dir: bool) -> bool:
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            if parts[i - 1].lower() == ".git" or "/".join(parts[:i]) in self._paths:
                return True
            if self._names.match(parts[:i]) is not None:
                return True
        return False


def _record(
    ws_root: Path,
    git: Git,
    tree: Path,
    *,
    ref: str,
    message: str,
    parent: str | None,
    left_out: Iterable[str],
    algorithm: str,
    limits: Limits | None = None,
) -> str:
    """Commit the work tree on ``ref`` (see ``_record``); the manifest is kept beside."""
    manifest, since = load_manifest(ws_root / _MANIFEST)
    done = record(
        git,
        tree,
        ref=ref,
        message=message,
        parent=parent,
        excluded=_Excluded(left_out),
        algorithm=algorithm,
        manifest=manifest,
        since_ns=since,
        limits=limits,
    )
    save_manifest(ws_root / _MANIFEST, done.manifest)
    if done.commit != parent:
        git.run("update-ref", ref, done.commit)
    return done.commit


def prepare(
    source: str,
    *,
    store: CodeStore,
    state_dir: Path,
    task: str = "",
    agent: str = "",
    test: str = "",
    respect_gitignore: bool = False,
    rounds: int = 1,
) -> Workspace:
    """Make a workspace of the project at ``source`` and record it (state "ready").
    ``rounds``: the most agent rounds of its run (it goes on while ``test`` fails)."""
    if rounds < 1:
        raise UsageError(f"rounds must be at least 1 (got {rounds})")
    started = time.perf_counter()
    real = _project_dir(source, state_dir)
    ws_id = new_workspace_id()
    root = workspace_root(state_dir, ws_id)
    root.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    root.mkdir(mode=0o700)
    root = root.resolve()
    tree = root / "tree"
    git_dir = root / "git"
    branch = f"jarvis/code-{ws_id}"
    try:
        head, objects, algorithm = _project_repository(real)
        _private_repository(git_dir, objects, algorithm)
        report = _copy_project(real, tree, git_dir, head, respect_gitignore)
        left = report.all_left_out
        (root / _LEFT_OUT).write_bytes(b"".join(os.fsencode(p) + b"\0" for p in left))
        (root / _FORMAT).write_text(algorithm)
        base = _record(
            root,
            Git(git_dir),
            tree,
            ref=f"refs/heads/{branch}",
            message=f"jarvis code {ws_id}: the project as given",
            parent=head or None,
            left_out=left,
            algorithm=algorithm,
        )
        if base == head:
            Git(git_dir).run("update-ref", f"refs/heads/{branch}", base)
        Git(git_dir).run("symbolic-ref", "HEAD", f"refs/heads/{branch}")
    except BaseException:
        _remove(root, tree)
        raise
    ws = Workspace(
        id=ws_id,
        source=str(real),
        kind="git" if head else "copy",
        path=str(tree),
        git_dir=str(git_dir),
        branch=branch,
        base=base,
        task=task,
        agent=agent,
        test=test,
        rounds=rounds,
        setup_s=round(time.perf_counter() - started, 3),
        files=report.files,
        left_out=tuple(x.to_dict() for x in report.left_out),
        more_left_out=report.more_left_out,
    )
    return store.put(ws)


def _project_dir(source: str, state_dir: Path) -> Path:
    """The project directory ``source`` names, resolved; refused when it is not one, or
    holds (or is inside) jarvis's workspaces."""
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
    return real


def _copy_project(
    real: Path, tree: Path, git_dir: Path, head: str, respect_gitignore: bool
) -> CopyReport:
    """Copy the project into ``tree`` (owned by the sandbox's user), without what git
    ignores when it is a repository (or ``respect_gitignore``); what was left out is in
    the report."""
    only: set[str] | None = None
    listing = ["ls-files", "-z", "--others", "--exclude-standard"]
    if head:  # the project's tracked and untracked files, not the ignored ones
        only = set(_split(_project_git(real, *listing, "--cached").stdout))
    elif respect_gitignore:
        only = set(_split(_project_git(real, *listing, git_dir=git_dir).stdout))
    tree.mkdir()
    owner = _sandbox_owner()
    os.chmod(tree, 0o770)
    if owner is not None:
        os.chown(tree, *owner)
    report = copy_tree(str(real), str(tree), _names(), only=only, owner=owner)
    if only is not None:  # what is ignored, listed so nobody wonders where it went
        ignored = _project_git(
            real, *listing, "--ignored", "--directory", git_dir=None if head else git_dir
        ).stdout
        for name in _split(ignored):
            report.leave_out(name.rstrip("/"), "ignored by git")
    return report


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


def snapshot(ws: Workspace, limits: Limits | None = None) -> Change:
    """Commit the work tree as it is now (the result) on the workspace's branch, and
    say what changed since ``base``. WorkspaceError, with nothing recorded, when the
    change is larger than ``limits``."""
    root = Path(ws.path).parent
    git = Git(Path(ws.git_dir))
    left = _split((root / _LEFT_OUT).read_bytes()) if (root / _LEFT_OUT).exists() else []
    algorithm = (root / _FORMAT).read_text().strip() if (root / _FORMAT).exists() else "sha1"
    tree = Path(ws.path)
    left = [*left, *_nested_repositories(tree)]
    result = _record(
        root,
        git,
        tree,
        ref=f"refs/heads/{ws.branch}",
        message=f"jarvis code {ws.id}: {ws.task[:200]}",
        parent=ws.base,
        left_out=left,
        algorithm=algorithm,
        limits=limits,
    )
    names = git.run("diff", "--name-status", "-z", "--no-renames", ws.base, result)
    fields = _split(names)
    files = tuple((fields[i], fields[i + 1]) for i in range(0, len(fields) - 1, 2))
    diff, truncated = _bounded_diff(git, ws.base, result)
    return Change(result, files, diff, truncated)


def remove_git_entries(tree: Path) -> list[str]:
    """Remove every ``.git`` below ``tree`` (jarvis puts none there: the agent did), so
    that git run in the workspace by a person finds no repository of the agent's
    making. Nothing is followed through a symlink. The paths that could not be
    removed (files the sandbox's user made, when jarvis is not root)."""
    kept = []
    for dirpath, dirs, files in os.walk(tree):
        for name in [*dirs, *files]:
            if name.lower() != ".git":
                continue
            path = os.path.join(dirpath, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            if os.path.lexists(path):
                kept.append(os.path.relpath(path, tree))
        dirs[:] = [d for d in dirs if d.lower() != ".git"]
    return kept


def remove_bytecode(tree: Path) -> None:
    """Remove the compiled Python the workspace holds (``__pycache__``, ``*.pyc``):
    never part of a change, so never reviewed, yet Python would run it in place of the
    source beside it. Nothing is followed through a symlink."""
    for dirpath, dirs, files in os.walk(tree):
        for name in dirs:
            if name == "__pycache__":
                path = os.path.join(dirpath, name)
                if os.path.islink(path):
                    os.unlink(path)
                else:
                    shutil.rmtree(path, ignore_errors=True)
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.lower().endswith((".pyc", ".pyo")):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(dirpath, name))


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
    # --text: every file is shown as text, whatever attributes or its content say (an
    # attribute such as ``-diff`` would otherwise hide a text change as a binary one).
    data, truncated = git.head(
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        "--text",
        "--no-renames",
        base,
        result,
        limit=MAX_DIFF_BYTES,
    )
    return data.decode("utf-8", "replace"), truncated


def discard(ws: Workspace, store: CodeStore, state_dir: Path, *, forget: bool = True) -> None:
    """Remove the workspace: its tree, its private repository, its files; and, with
    ``forget``, its record."""
    root = workspace_root(state_dir, ws.id)
    git_dir = Path(ws.git_dir)
    legacy = git_dir.parent.name == "worktrees" and ws.kind == "git"
    _remove(root, Path(ws.path), Path(ws.source) if legacy else None, ws.branch, git_dir)
    if forget:
        store.delete(ws.id)


def _remove(
    root: Path,
    tree: Path,
    legacy_source: Path | None = None,
    branch: str = "",
    git_dir: Path | None = None,
) -> None:
    # rmtree never follows a symlink out of the tree (it works through descriptors).
    shutil.rmtree(tree, ignore_errors=True)
    if legacy_source is not None and legacy_source.is_dir() and git_dir is not None:
        # A workspace made by an earlier jarvis: a worktree of the project.
        shutil.rmtree(git_dir, ignore_errors=True)
        _in_project_quiet(legacy_source, "worktree", "prune")
        _in_project_quiet(legacy_source, "update-ref", "-d", f"refs/heads/{branch}")
    shutil.rmtree(root, ignore_errors=True)
    if os.path.lexists(root):
        raise WorkspaceError(f"could not remove {root} entirely")


def _in_project_quiet(project: Path, *args: str) -> None:
    _project_git(project, *args, check=False)
