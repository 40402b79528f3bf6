"""Installing a built-in external agent: its pinned npm tree in the cache.

``jarvis agents install NAME`` (and a run's first use) copies the agent's committed
``package.json`` and ``package-lock.json`` into ``JARVIS_AGENTS_DIR/NAME`` (default:
the cache dir's ``agents/``) and runs ``npm ci`` there: exactly the locked versions,
every time. A marker holding the lock file's hash says the tree is complete and current;
a tree without it (an interrupted install) is installed again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from .._errors import AgentNotInstalled
from ._registry import AgentDefinition

__all__ = ["agents_dir", "install", "install_dir", "installed", "missing", "node_missing"]

_MARKER = ".jarvis-installed"
_LOCK_FILES = ("package.json", "package-lock.json")


def agents_dir() -> Path:
    value = os.environ.get("JARVIS_AGENTS_DIR")
    if value:
        return Path(value).expanduser()
    from .._paths import paths

    return paths().cache / "agents"


def install_dir(agent: AgentDefinition) -> Path:
    return agents_dir() / agent.name


def _lock_text(agent: AgentDefinition, name: str) -> bytes:
    return resources.files("jarvisd.external").joinpath("npm", agent.name, name).read_bytes()


def _lock_hash(agent: AgentDefinition) -> str:
    digest = hashlib.sha256()
    for name in _LOCK_FILES:
        digest.update(_lock_text(agent, name))
    return digest.hexdigest()


def installed(agent: AgentDefinition) -> bool:
    """Whether the agent's pinned tree is complete in the cache."""
    if not agent.builtin:
        return True
    where = install_dir(agent)
    try:
        marker = (where / _MARKER).read_text().strip()
    except OSError:
        return False
    return marker == _lock_hash(agent) and (where / agent.binary).exists()


def node_missing(agent: AgentDefinition) -> str | None:
    """Why the agent cannot run for want of Node.js here, or None."""
    if agent.needs_node and shutil.which("node") is None:
        return (
            f"agent {agent.name!r} needs Node.js (20 or newer) on PATH: install it "
            "(Debian: apt-get install nodejs) and run again"
        )
    return None


def missing(agent: AgentDefinition) -> str | None:
    """One line saying what is missing to run ``agent`` and how to fix it, or None."""
    why = node_missing(agent)
    if why is not None:
        return why
    if not installed(agent):
        return f"agent {agent.name!r} is not installed: run `jarvis agents install {agent.name}`"
    return None


def install(agent: AgentDefinition, *, progress: Callable[[str], None] | None = None) -> Path:
    """Install (or repair) the agent's pinned tree; returns its directory. Raises
    AgentNotInstalled, with the fix, when npm is missing or fails."""
    where = install_dir(agent)
    if installed(agent):
        return where
    npm = shutil.which("npm")
    if npm is None:
        raise AgentNotInstalled(
            f"installing agent {agent.name!r} needs npm: install Node.js and npm "
            "(Debian: apt-get install nodejs npm) and run again"
        )
    where.mkdir(parents=True, exist_ok=True)
    (where / _MARKER).unlink(missing_ok=True)
    for name in _LOCK_FILES:
        (where / name).write_bytes(_lock_text(agent, name))
    packages = ", ".join(f"{n}@{v}" for n, v in agent.packages)
    if progress is not None:
        progress(f"installing {agent.name} ({packages}) into {where}")
    proc = _npm(npm, "ci", where, progress)
    if proc.returncode != 0 and "EUSAGE" in (proc.stderr or ""):
        # A registry that lacks some platforms' optional packages (a mirror) makes npm
        # drop them from the lock, and `npm ci` then calls the lock out of sync:
        # `npm install` still installs the locked versions of what is there.
        proc = _npm(npm, "install", where, progress)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or "").strip().splitlines()[-5:])
        raise AgentNotInstalled(
            f"npm ci for agent {agent.name!r} failed (exit {proc.returncode}); is the npm "
            f"registry reachable? Run `jarvis agents install {agent.name}` again"
            + (f":\n{tail}" if tail else "")
        )
    if not (where / agent.binary).exists():
        raise AgentNotInstalled(
            f"agent {agent.name!r} installed, but {agent.binary} is missing (is this a "
            "linux-x64 machine?)"
        )
    (where / _MARKER).write_text(_lock_hash(agent) + "\n")
    if progress is not None:
        progress(f"installed {agent.name}")
    return where


def _npm(
    npm: str, verb: str, where: Path, progress: Callable[[str], None] | None
) -> subprocess.CompletedProcess[str]:
    command = [npm, verb, "--no-audit", "--no-fund", "--loglevel=error"]
    if progress is not None:
        progress(f"npm {verb} in {where}")
    return subprocess.run(
        command,
        cwd=where,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
