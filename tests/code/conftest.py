"""A small git project with a failing pytest test, and helpers to look at trees."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

CALC = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=True)
    return done.stdout.decode().strip()


def tree_hashes(root: Path) -> dict[str, str]:
    """A hash of every file under ``root`` (links by their target), ``.git`` aside."""
    found = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = "link:" + os.readlink(path)
            else:
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repository whose one test fails (add subtracts), with an uncommitted
    change and an untracked file that the workspace must carry over."""
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "calc.py").write_text(CALC)
    (root / "test_calc.py").write_text(TEST)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    (root / "README").write_text("uncommitted and untracked\n")
    with (root / "test_calc.py").open("a") as handle:
        handle.write("\n\ndef test_more():\n    assert add(0, 0) == 0\n")
    return root
