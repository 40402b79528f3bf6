"""What a code-mode change offers the client as text, read as hostile input: the
workspace was written by an agent in the sandbox."""

from __future__ import annotations

import os
from pathlib import Path

from jarvisd.acp._edits import FileChange, changed_files


def test_text_files_are_offered_with_their_old_and_new_text(tmp_path: Path) -> None:
    project, workspace = tmp_path / "project", tmp_path / "ws"
    for root in (project, workspace):
        (root / "pkg").mkdir(parents=True)
    (project / "pkg/a.py").write_text("old\n")
    (workspace / "pkg/a.py").write_text("new\n")
    (workspace / "b.py").write_text("added\n")
    files = [{"status": "M", "path": "pkg/a.py"}, {"status": "A", "path": "b.py"}]
    assert changed_files(str(project), str(workspace), files) == [
        FileChange(str(project / "pkg/a.py"), "old\n", "new\n"),
        FileChange(str(project / "b.py"), None, "added\n"),
    ]


def test_a_link_the_agent_left_is_never_read_through(tmp_path: Path) -> None:
    # An agent cannot read the host's files from the sandbox, but it can leave a link
    # to one in the workspace. Read through, its target's text would be offered to the
    # client and written into the project as a plain file, for the next run to read.
    project, workspace = tmp_path / "project", tmp_path / "ws"
    project.mkdir()
    workspace.mkdir()
    secret = tmp_path / "host-secret"
    secret.write_text("the host's secret\n")
    os.symlink(secret, workspace / "leak.txt")
    (workspace / "real").mkdir()
    os.symlink(tmp_path, workspace / "real" / "up")
    for path in ("leak.txt", "real/up/host-secret"):
        assert changed_files(str(project), str(workspace), [{"status": "A", "path": path}]) is None


def test_paths_outside_the_tree_and_odd_entries_are_not_offered(tmp_path: Path) -> None:
    for entry in ({"status": "A", "path": "../x"}, {"status": "A", "path": "/etc/passwd"},
                  {"status": "D", "path": "x"}, {"status": "A"}, "x"):  # fmt: skip
        assert changed_files(str(tmp_path), str(tmp_path), [entry]) is None
