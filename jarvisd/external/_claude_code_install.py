"""The claude_code agent's Node.js side: the bridge scripts (``node_bridge/``, shipped with
jarvis) and the Claude Agent SDK they load, installed with ``npm ci`` from the pinned
lockfile into ``<cache>/agents/claude_code`` on first use or by ``jarvis agents install
claude_code``.

A complete install has a marker holding the lockfile's hash, written last: a changed
pin or an interrupted install is redone, never half-used.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from .._errors import EngineUnavailable, JarvisError
from .._paths import paths

__all__ = [
    "MIN_NODE",
    "NodeUnavailable",
    "bridge_dir",
    "ensure_sdk",
    "find_node",
    "install_dir",
]

MIN_NODE = (18, 14)
_MARKER = ".jarvis-lock-sha256"
_INSTALL_TIMEOUT = 900


class NodeUnavailable(JarvisError):
    """No usable Node.js (exit 3, like a missing engine); the message says the fix."""

    exit_code = EngineUnavailable.exit_code


def bridge_dir() -> Path:
    """node_bridge/: in the wheel (jarvisd/_node_bridge) or in a source checkout."""
    here = Path(__file__).resolve().parents[1]
    for candidate in (here / "_node_bridge", here.parent / "node_bridge"):
        if (candidate / "claude_code.mjs").is_file():
            return candidate
    raise JarvisError("the node_bridge scripts are missing from this installation")


def install_dir() -> Path:
    return paths().cache / "agents" / "claude_code"


def find_node() -> str:
    """The ``node`` on PATH when it is recent enough, else NodeUnavailable with the fix."""
    node = shutil.which("node")
    fix = "install Node.js 20 or later (https://nodejs.org, or your system's nodejs package)"
    if node is None:
        raise NodeUnavailable(f"the claude_code agent needs Node.js, and none is on PATH: {fix}")
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NodeUnavailable(f"cannot run {node} --version ({exc}): {fix}") from exc
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+\S*", out.stdout.strip())
    if match is None or (int(match[1]), int(match[2])) < MIN_NODE:
        found = out.stdout.strip() or "an unknown version"
        want = ".".join(map(str, MIN_NODE))
        raise NodeUnavailable(
            f"the claude_code agent needs Node.js >= {want}, {node} is {found}: {fix}"
        )
    return node


def _lock_hash(source: Path) -> str:
    return hashlib.sha256((source / "package-lock.json").read_bytes()).hexdigest()


def is_installed() -> bool:
    try:
        return (install_dir() / _MARKER).read_text() == _lock_hash(bridge_dir())
    except OSError:
        return False


def ensure_sdk(progress: Callable[[str], None] | None = None) -> Path:
    """The directory whose node_modules holds the SDK, installing it first when needed."""
    find_node()
    if is_installed():
        return install_dir()
    say = progress or (lambda line: None)
    npm = shutil.which("npm")
    if npm is None:
        raise NodeUnavailable("the claude_code agent needs npm to install the Claude Agent SDK")
    source, target = bridge_dir(), install_dir()
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(source / name, target / name)
    say(f"installing the Claude Agent SDK into {target} (npm ci, pinned; about 430 MB)")
    try:
        done = subprocess.run(
            [npm, "ci", "--omit=dev", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=target,
            capture_output=True,
            text=True,
            timeout=_INSTALL_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        raise JarvisError(f"npm ci took more than {_INSTALL_TIMEOUT} s") from None
    if done.returncode != 0:
        tail = [line for line in done.stderr.splitlines() if "nodedir" not in line][-3:]
        raise JarvisError(f"installing the Claude Agent SDK failed: {' | '.join(tail)}")
    (target / _MARKER).write_text(_lock_hash(source))
    say("claude_code is installed")
    return target
