"""A private workspace, copied for the sandbox user.

jarvis as root runs an agent's container as the sandbox user, who cannot enter a
workspace that is private to root (``mktemp -d``, a 0700 project). Rather than
refuse, or loosen the user's directory, the agent works on a copy owned by the
sandbox user, mounted at the workspace's own path (so the paths it sees and the ACP
file requests it makes, which jarvis serves from the real workspace, agree). What the
agent wrote in the copy with its own tools is written back when the run ends: new and
changed text files, through the same confined writes as its file requests. Deletions
are not applied (they are listed in the log), nor are names the copy left out (secrets,
by the sandbox's blocked names).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

from .._errors import ToolError
from ._workspace import Workspace

__all__ = ["Mirror"]

log = logging.getLogger(__name__)


class Mirror:
    """A copy of ``root`` owned by ``owner`` (uid, gid); :meth:`start` makes it."""

    def __init__(self, root: Path, owner: tuple[int, int]) -> None:
        self.root = root
        self.owner = owner
        self.dir: Path | None = None
        self.tree: Path | None = None

    def start(self) -> Path:
        """Copy the workspace; the copy's directory (to mount at the workspace's path)."""
        from ..sandbox import BLOCKED_PATTERNS
        from ..sandbox._copy import NameFilter, copy_tree

        self.dir = Path(tempfile.mkdtemp(prefix="jarvis-ws-"))
        tree = self.dir / "tree"
        tree.mkdir()
        os.chown(tree, *self.owner)
        os.chmod(tree, 0o770)
        copy_tree(str(self.root), str(tree), NameFilter(BLOCKED_PATTERNS), owner=self.owner)
        self.tree = tree
        return tree

    def write_back(self) -> list[str]:
        """Write the copy's new and changed text files into the workspace; the paths
        written (relative)."""
        if self.tree is None:
            return []
        target = Workspace(self.root)
        written: list[str] = []
        for dirpath, _dirs, names in os.walk(self.tree):  # never follows links
            for name in names:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, self.tree)
                if _changed(path, self.root / rel) and _write(target, rel, path):
                    written.append(rel)
        for dirpath, _dirs, names in os.walk(self.root):
            for name in names:
                rel = os.path.relpath(os.path.join(dirpath, name), self.root)
                if not os.path.lexists(self.tree / rel) and (self.tree / rel).parent.is_dir():
                    log.info("the agent removed %s in its copy: not applied", rel)
        return written

    def close(self) -> None:
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = self.tree = None


def _changed(copy: str, original: Path) -> bool:
    info = os.lstat(copy)
    if not stat.S_ISREG(info.st_mode):
        return False  # links, FIFOs...: never written back
    try:
        if os.lstat(original).st_size != info.st_size:
            return True
        with open(copy, "rb") as a, open(original, "rb") as b:
            return a.read() != b.read()
    except OSError:
        return True  # new (or unreadable: the confined write decides)


def _write(target: Workspace, rel: str, copy: str) -> bool:
    try:
        with open(copy, "rb") as fh:
            data = fh.read(target.max_write_bytes + 1)
        target.write_text(rel, data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ToolError) as exc:
        log.warning("the agent's change to %s was not written back: %s", rel, exc)
        return False
    return True
