"""Code-changing prompts: a ``jarvis code`` run, its change offered to the client.

In the session's ``code`` mode a prompt runs as a ``jarvis code`` run of the CodeAct
agent on a workspace of the session's cwd (sandboxed; the project is not touched). Its
change is then one ``tool_call`` of kind ``edit`` holding an ACP ``diff`` per file, and
the client is asked (``session/request_permission``). Allowed: the files are written
through the client's ``fs/write_text_file`` when it offers it (its open buffers stay in
sync), else by jarvis's three-way apply; refused, or unanswered: the workspace is
discarded and the project is as it was.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

__all__ = ["CODE_AGENT", "CODE_MODE", "MAX_OFFERED_BYTES", "FileChange", "changed_files"]

#: The session mode of code-changing prompts, and the agent that runs them (CodeAct).
CODE_MODE = "code"
CODE_AGENT = "native_openhands"
#: The most of one file's text offered as a diff (a larger change is applied by jarvis).
MAX_OFFERED_BYTES = 1024 * 1024
#: The most files offered one by one.
MAX_OFFERED_FILES = 200


@dataclass(frozen=True, slots=True)
class FileChange:
    path: str  # absolute, in the project
    old: str | None  # None: a new file
    new: str | None  # None: deleted, or not text (then jarvis applies the change)


def _text(root: str, rel: str) -> str | None:
    """The text of the regular file ``rel`` below ``root``, or None. No component is
    followed through a symlink: the agent that wrote the workspace could have left a
    link to a host file there, whose text would otherwise be offered to the client
    and written into the project as a plain file."""
    from ..code import read_below

    data = read_below(root, rel, MAX_OFFERED_BYTES + 1)
    if data is None or len(data) > MAX_OFFERED_BYTES:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def changed_files(project: str, workspace: str, files: Any) -> list[FileChange] | None:
    """The change as text files (old and new text), or None when some part of it
    cannot go through the client as text (deleted, binary, large, too many files):
    jarvis's own apply then takes the whole change."""
    if not isinstance(files, list) or not files or len(files) > MAX_OFFERED_FILES:
        return None
    found: list[FileChange] = []
    for entry in files:
        status = entry.get("status") if isinstance(entry, dict) else None
        rel = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(rel, str) or not isinstance(status, str) or status not in ("A", "M"):
            return None
        parts = PurePosixPath(rel).parts
        if not parts or rel.startswith("/") or ".." in parts:
            return None
        new = _text(workspace, rel)
        old = None if status == "A" else _text(project, rel)
        if new is None or (status == "M" and old is None):
            return None
        found.append(FileChange(os.path.join(project, rel), old, new))
    return found
