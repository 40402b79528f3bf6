"""The project's source files that define what a task and a test failure call.

A failing assertion names the test's file, not the file to fix: pytest prints
``assert inflection.dasherize(input) == expected`` at test_inflection.py:426, and the
bug report says ``dasherize('puni_puni') returns 'puni_puni'``. Given only the test, a
small model edits the test, or claims a fix it never made (the codefix yardstick's
runs did both). So the names the task and the failure write as calls (``name(``) are
looked up among the definitions of the project's own source files, tests left out,
and the files that define them are put in front of the agent as well (as the
definitions named, by ``_excerpt``), before the tests' files.

Bounded, and blind to links: a walk that follows no symlink, skips hidden, virtual
environment and build directories, looks at most :data:`MAX_SCANNED` Python files of
at most :data:`MAX_FILE_BYTES` each, and reads each through ``read_below`` (no link on
the way: the workspace is the agent's to change between rounds).
"""

from __future__ import annotations

import builtins
import keyword
import os
import re

from ._testrun import read_below

__all__ = ["MAX_SCANNED", "called_names", "defining_files", "is_test_file"]

#: The most Python files looked into, and the most bytes read of each.
MAX_SCANNED = 2000
MAX_FILE_BYTES = 200_000
#: The most directory entries the walk visits (a huge tree is not searched whole).
MAX_ENTRIES = 50_000

_CALL = re.compile(r"(?<![\w])([A-Za-z_][A-Za-z0-9_]*)\(")
#: The class or module of a qualified call: ``Version`` of ``Version.parse(``.
_QUALIFIER = re.compile(r"(?<![\w.])([A-Za-z_][A-Za-z0-9_]*)\.[A-Za-z_][A-Za-z0-9_]*\(")
_DEF = re.compile(rb"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.M)
#: Directories that hold no source of the project's own.
_SKIP_DIRS = frozenset(
    {"__pycache__", "node_modules", "venv", "build", "dist", "site-packages", "docs", "doc"}
)
#: Calls that say nothing of where the bug is.
_COMMON = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | {"self", "cls", "super"}


def is_test_file(rel: str) -> bool:
    """Whether ``rel`` (relative to the project) is one of its tests, as pytest finds
    them: under a ``tests``/``test``/``testing`` directory, ``test_*.py``,
    ``*_test.py`` or a ``conftest.py``."""
    parts = rel.split("/")
    name = parts[-1]
    return (
        any(p in ("tests", "test", "testing") for p in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


def called_names(texts: list[str]) -> list[str]:
    """The names ``texts`` write as calls, in order of first appearance, then the
    classes and modules they qualify calls with (a file defining ``Version`` as well as
    ``parse`` is the one ``Version.parse(`` means); without builtins, keywords and
    tests' own functions."""
    out: list[str] = []
    for pattern in (_CALL, _QUALIFIER):
        for text in texts:
            for name in pattern.findall(text):
                if name in _COMMON or name.startswith("test") or name in out:
                    continue
                out.append(name)
    return out


def _source_files(root: str) -> list[str]:
    """The project's Python source files (tests left out), relative to ``root``, in a
    stable order; at most :data:`MAX_SCANNED`."""
    found: list[str] = []
    seen = 0
    for top, dirs, files in os.walk(root):  # followlinks=False: a link is not entered
        seen += len(dirs) + len(files)
        if (top != root and os.path.isfile(os.path.join(top, "pyvenv.cfg"))) or seen > MAX_ENTRIES:
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        rel_top = os.path.relpath(top, root)
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            rel = name if rel_top == "." else f"{rel_top}/{name}"
            if not is_test_file(rel):
                found.append(rel.replace(os.sep, "/"))
                if len(found) >= MAX_SCANNED:
                    return found
    return found


def defining_files(texts: list[str], root: str, *, skip: set[str], max_files: int) -> list[str]:
    """The project's source files (not in ``skip``) that define a function or class
    that ``texts`` call, at most ``max_files``: first those defining the earliest
    called name (the task comes first in ``texts``), then those defining the most."""
    called = called_names(texts)
    if not called or max_files <= 0:
        return []
    rank = {name.encode(): i for i, name in enumerate(called)}
    scored: list[tuple[int, int, str]] = []
    root = os.path.realpath(root)
    for rel in _source_files(root):
        if rel in skip:
            continue
        data = read_below(root, rel, MAX_FILE_BYTES)
        if not data:
            continue
        defined = {m for m in _DEF.findall(data) if m in rank}
        if defined:
            scored.append((min(rank[d] for d in defined), -len(defined), rel))
    scored.sort()
    return [rel for _, _, rel in scored[:max_files]]
