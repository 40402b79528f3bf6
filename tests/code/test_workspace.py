"""Workspaces without a container: what is copied and left out, how a change is
recorded, how apply merges (all or nothing) and what host-side git trusts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jarvisd._errors import WorkspaceError
from jarvisd._paths import paths
from jarvisd.code import CodeStore, Workspace, apply, prepare
from jarvisd.code import _apply as apply_module
from jarvisd.code._workspace import snapshot

from .conftest import CALC, FIXED, git, tree_hashes


def store() -> CodeStore:
    return CodeStore(paths().state / "code.db")


def make(project: Path, **kw: bool) -> Workspace:
    return prepare(str(project), store=store(), state_dir=paths().state, task="t", **kw)


def finish(ws: Workspace) -> Workspace:
    """What the run does once the agent is done: record the change."""
    change = snapshot(ws)
    files = [{"status": s, "path": p} for s, p in change.files]
    return store().update(ws, state="done", outcome={"result": change.result, "files": files})


def left_out(ws: Workspace) -> dict[str, str]:
    return {x["path"]: x["reason"] for x in ws.left_out}


def test_a_copy_never_follows_links_and_leaves_out_what_it_must(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host data")
    project = tmp_path / "plain"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("print(1)\n")
    (project / "escape").symlink_to(outside)
    (project / "hosts").symlink_to("/etc/hosts")
    os.mkfifo(project / "pipe")
    (project / "tokenizer.json").write_text("{}")
    (project / ".config" / "gcloud").mkdir(parents=True)
    (project / "vendor" / ".git").mkdir(parents=True)
    odd = ["-rf", "new\nline", "sp ace", os.fsdecode(b"bad\xffbyte")]
    for name in odd:
        (project / name).write_text(repr(name))
    ws = make(project)
    tree = Path(ws.path)
    assert ws.kind == "copy"
    assert os.readlink(tree / "escape") == str(outside)  # a link, not a copy of the target
    assert os.readlink(tree / "hosts") == "/etc/hosts"
    assert all((tree / name).read_text() == repr(name) for name in odd)
    assert (tree / "src" / "main.py").read_text() == "print(1)\n"
    assert left_out(ws) == {
        "pipe": "a FIFO",
        "tokenizer.json": "blocked name (token*)",
        ".config/gcloud": "blocked name (.config/gcloud)",
        "vendor/.git": "git metadata of a nested repository",
    }
    assert not (tree / "pipe").exists() and not (tree / "tokenizer.json").exists()


def test_respect_gitignore_for_a_copy(tmp_path: Path) -> None:
    project = tmp_path / "plain"
    (project / "build").mkdir(parents=True)
    (project / "build" / "out.o").write_text("x")
    (project / ".gitignore").write_text("build/\n")
    (project / "a.py").write_text("")
    assert (Path(make(project).path) / "build" / "out.o").exists()
    ws = make(project, respect_gitignore=True)
    assert not (Path(ws.path) / "build").exists()
    assert left_out(ws) == {"build": "ignored by git"}


def test_caches_and_blocked_names_the_agent_writes_are_not_part_of_the_change(
    project: Path,
) -> None:
    ws = make(project)
    tree = Path(ws.path)
    (tree / "__pycache__").mkdir()
    (tree / "__pycache__" / "calc.cpython-311.pyc").write_bytes(b"\0")
    (tree / ".env.local").write_text("TOKEN=1\n")
    (tree / ".pytest_cache").mkdir()
    (tree / "calc.py").write_text(FIXED)
    assert finish(ws).outcome["files"] == [{"status": "M", "path": "calc.py"}]


def test_a_tracked_blocked_file_is_left_out_without_becoming_a_deletion(project: Path) -> None:
    (project / "credentials.json").write_text("{}")
    git(project, "add", "credentials.json")
    git(project, "commit", "-qm", "oops")
    ws = make(project)
    assert not (Path(ws.path) / "credentials.json").exists()
    assert finish(ws).outcome["files"] == []
    assert git(project, "--git-dir", ws.git_dir, "show", f"{ws.base}:credentials.json") == "{}"


def test_host_git_never_follows_a_git_file_the_sandbox_wrote(project: Path) -> None:
    ws = make(project)
    tree = Path(ws.path)
    marker = tree.parent / "pwned"
    evil = tree / "evil"
    subprocess.run(["git", "init", "-q", str(evil)], check=True)
    with (evil / ".git" / "config").open("a") as handle:
        handle.write(f'[core]\n\tfsmonitor = "touch {marker}; false"\n')
    (tree / ".git").write_text(f"gitdir: {evil / '.git'}\n")
    (tree / "calc.py").write_text(FIXED)
    finish(ws)
    assert not marker.exists()
    # The attack is real: git left to discover the repository runs the command.
    subprocess.run(["git", "-c", "safe.directory=*", "status"], cwd=tree, capture_output=True)
    assert marker.exists()


def test_an_apply_that_fails_half_way_puts_every_file_back(project: Path) -> None:
    ws = make(project)
    (Path(ws.path) / "calc.py").write_text(FIXED)
    (Path(ws.path) / "new.py").write_text("new\n")
    (Path(ws.path) / "test_calc.py").unlink()
    ws = finish(ws)
    before = tree_hashes(project)
    real_replace = os.replace
    calls = []

    def failing_replace(*args: object, **kw: object) -> None:
        calls.append(args)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_replace(*args, **kw)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(apply_module.os, "replace", failing_replace)
        with pytest.raises(WorkspaceError, match="every file was put back"):
            apply(ws.id, store(), paths().state)
    assert tree_hashes(project) == before
    assert [p.name for p in project.iterdir() if ".jarvis-" in p.name] == []
    apply(ws.id, store(), paths().state)
    assert (project / "calc.py").read_text() == FIXED and (project / "new.py").exists()
    assert not (project / "test_calc.py").exists()


def test_apply_never_writes_through_a_symlink(project: Path, tmp_path: Path) -> None:
    (project / "pkg").mkdir()
    (project / "pkg" / "mod.py").write_text("a = 1\n")
    ws = make(project)
    (Path(ws.path) / "pkg" / "mod.py").write_text("a = 2\n")
    ws = finish(ws)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mod.py").write_text("a = 1\n")
    (project / "pkg" / "mod.py").unlink()
    (project / "pkg").rmdir()
    (project / "pkg").symlink_to(elsewhere)
    with pytest.raises(WorkspaceError, match="without a symlink"):
        apply(ws.id, store(), paths().state)
    assert (elsewhere / "mod.py").read_text() == "a = 1\n"


def test_apply_refuses_a_workspace_without_a_change(project: Path) -> None:
    ws = finish(make(project))
    with pytest.raises(WorkspaceError, match="no change"):
        apply(ws.id, store(), paths().state)
    assert (project / "calc.py").read_text() == CALC


def test_unknown_and_ambiguous_ids(project: Path) -> None:
    with pytest.raises(WorkspaceError, match="no workspace"):
        store().get("0123")
    with pytest.raises(WorkspaceError, match="no workspace"):
        store().get("../etc")


def test_a_project_holding_the_workspaces_is_refused(tmp_path: Path) -> None:
    from jarvisd._errors import UsageError

    for where in (paths().state, paths().state.parent):
        with pytest.raises(UsageError, match="holds jarvis's workspaces"):
            prepare(str(where), store=store(), state_dir=paths().state)


def test_a_wide_tree_holds_two_descriptors_a_level(tmp_path: Path) -> None:
    import resource

    from jarvisd.sandbox._copy import NameFilter, copy_tree

    source, target = tmp_path / "wide", tmp_path / "copy"
    for i in range(200):
        (source / f"d{i:03d}").mkdir(parents=True)
        (source / f"d{i:03d}" / "f").write_text(str(i))
    target.mkdir()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 40, hard))
    try:
        report = copy_tree(str(source), str(target), NameFilter(()))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert report.files == 200 and (target / "d199" / "f").read_text() == "199"
