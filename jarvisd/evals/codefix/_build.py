"""Make a bug of the corpus: the pinned sdist (downloaded once, its sha256 checked),
unpacked, mutated, committed as a fresh git repository.

The repository holds ONE commit, the project with the bug: the agent sees a clean
project (``git status`` empty, no history holding the fix). The pristine tree stays
in the cache, outside it, for the fix check. Everything is deterministic: the
mutation is an exact snippet, the commit's author, dates and message are fixed.

pip fetches the sdist (``pip download --no-deps --no-binary :all: --require-hashes``:
the host's pip configuration decides the index, and pip checks the pinned hash before
it unpacks or prepares anything); the hash is checked again here on the file itself.
pip download then prepares the sdist's metadata, which runs its build backend on the
host: only on the pinned, hash-checked file (the tests, and every install of the
project, run in the sandbox).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..._errors import JarvisError
from ._corpus import Bug, Project

__all__ = ["BugRepo", "BuildError", "build_bug", "cache_dir", "fetch_sdist", "mutate", "pristine"]

#: pip's download of one sdist.
_PIP_TIMEOUT_S = 300
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "jarvis codefix",
    "GIT_AUTHOR_EMAIL": "codefix@jarvis.invalid",
    "GIT_COMMITTER_NAME": "jarvis codefix",
    "GIT_COMMITTER_EMAIL": "codefix@jarvis.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


class BuildError(JarvisError):
    """A bug of the corpus could not be made (download, hash, mutation, git)."""


@dataclass(frozen=True, slots=True)
class BugRepo:
    bug: Bug
    path: Path  # the git repository with the bug, the agent's project
    pristine: Path  # the unpacked sdist, untouched


def cache_dir() -> Path:
    """Where sdists and pristine trees are kept (``$JARVIS_CODEFIX_CACHE``, else
    ``~/.cache/jarvis-codefix``): outside jarvis's own cache so that a test run's
    temporary directories do not download them again."""
    given = os.environ.get("JARVIS_CODEFIX_CACHE")
    return Path(given) if given else Path.home() / ".cache" / "jarvis-codefix"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(project: Project) -> Path:
    """The project's sdist, from the cache or pip; its sha256 is the corpus's."""
    where = cache_dir() / "sdists"
    target = where / project.sdist
    if target.is_file() and _sha256(target) == project.sha256:
        return target
    where.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        pins = Path(tmp) / "requirements.txt"
        pins.write_text(f"{project.requirement} --hash=sha256:{project.sha256}\n")
        argv = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--require-hashes",
            "-q",
            "-r",
            str(pins),
            "-d",
            tmp,
        ]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(f"pip download {project.requirement}: {exc}") from exc
        got = Path(tmp) / project.sdist
        if done.returncode != 0 or not got.is_file():
            tail = (done.stderr or done.stdout)[-800:]
            raise BuildError(f"pip download {project.requirement} failed: {tail}")
        if _sha256(got) != project.sha256:
            raise BuildError(f"{project.sdist}: sha256 is not the corpus's {project.sha256}")
        os.replace(got, target)
    return target


def pristine(project: Project) -> Path:
    """The sdist unpacked (once) in the cache: the project as released."""
    root = cache_dir() / "pristine"
    final = root / project.root
    if (final / ".complete").is_file():
        return final
    sdist = fetch_sdist(project)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root))
    try:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")  # no links out, no devices, no absolute paths
        unpacked = tmp / project.root
        if not unpacked.is_dir():
            raise BuildError(f"{project.sdist} does not unpack to {project.root}/")
        (unpacked / ".complete").write_text(project.sha256)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(unpacked, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def mutate(text: str, bug: Bug) -> str:
    """``text`` with the bug's mutation; BuildError unless its snippet occurs once."""
    count = text.count(bug.old)
    if count != 1:
        raise BuildError(f"{bug.id}: the snippet occurs {count} times in {bug.file}, not once")
    return text.replace(bug.old, bug.new)


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, **_GIT_ENV}
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, timeout=120
    )
    if done.returncode != 0:
        raise BuildError(f"git {args[0]} in {repo}: {done.stderr.strip()[-400:]}")


def build_bug(bug: Bug, dest: Path) -> BugRepo:
    """A fresh git repository at ``dest`` (replaced when it exists) holding the project
    with ``bug``, in one commit."""
    source = pristine(bug.project)
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, dest, symlinks=True, ignore=shutil.ignore_patterns(".complete"))
    target = dest / bug.file
    target.write_text(mutate(target.read_text("utf-8"), bug), "utf-8")
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A", "-f")
    _git(dest, "commit", "-q", "--no-gpg-sign", "-m", f"{bug.project.requirement}")
    return BugRepo(bug, dest, source)
