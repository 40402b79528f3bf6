"""``jarvis code``: an agent works on an isolated workspace of a project, and its change
comes back as a diff to review before it is applied.

- :func:`prepare` makes a workspace (a git worktree on a new branch, or a copy), leaving
  out blocked names and virtual environments;
- :func:`run_code` runs the agent on it in the sandbox (the run contract's
  ``AgentSpec.workspace``), with the test command before and after;
- :func:`apply` merges the change onto the project (three-way, all or nothing);
  :func:`discard` removes the workspace and its branch;
- :class:`CodeStore` records workspaces in ``$JARVIS_STATE_DIR/code.db``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr

if TYPE_CHECKING:
    from ._apply import apply
    from ._job import run_code
    from ._store import CodeStore, Workspace
    from ._testrun import read_below
    from ._workspace import discard, prepare

_LAZY = {
    "CodeStore": "._store",
    "Workspace": "._store",
    "apply": "._apply",
    "discard": "._workspace",
    "prepare": "._workspace",
    "read_below": "._testrun",
    "run_code": "._job",
}

__all__ = ["CodeStore", "Workspace", "apply", "discard", "prepare", "read_below", "run_code"]

__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
