"""Paths in a workspace an agent may read but never write through jarvis: the ones
that configure a tool the user runs *without asking to run the project's code*.

A command planted there runs later on the host, as the user, when they merely look at
the work: ``git status`` runs ``core.fsmonitor`` from ``.git/config``, hooks run on
commit, direnv runs ``.envrc`` on ``cd``, editors run ``.vscode/tasks.json`` or
``.idea`` run configurations when the folder opens, ``pre-commit`` runs what
``.pre-commit-config.yaml`` names. The project's own code (a Makefile, package.json's
scripts, the tests) is different: the agent is there to edit it, and the user runs it
knowingly, after review.

Names are compared case-folded: on a case-insensitive file system ``.GIT/config`` is
``.git/config``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["PROTECTED_DIRS", "PROTECTED_FILES", "protected_reason"]

#: A path with any of these as a component (a directory or a gitdir pointer file)
#: is refused: version-control metadata and editors' run configurations.
PROTECTED_DIRS: frozenset[str] = frozenset(
    {".git", ".hg", ".svn", ".jj", ".vscode", ".idea", ".direnv", ".devcontainer"}
)
#: Files refused under any directory (git reads .gitattributes and .gitmodules at
#: every level; direnv and pre-commit read theirs where the user works).
PROTECTED_FILES: frozenset[str] = frozenset(
    {".gitmodules", ".gitattributes", ".envrc", ".pre-commit-config.yaml"}
)


def protected_reason(parts: Sequence[str]) -> str | None:
    """Why a write to the workspace path ``parts`` (its components below the root)
    is refused, or None when it is not protected."""
    folded = [p.casefold() for p in parts]
    for name in folded:
        if name in PROTECTED_DIRS:
            return (
                f"{name} configures tools that run commands on the user's machine "
                "(git, editors, direnv): an agent may not write there"
            )
    if folded and folded[-1] in PROTECTED_FILES:
        return (
            f"{folded[-1]} configures tools that run commands on the user's machine: "
            "an agent may not write it"
        )
    return None
