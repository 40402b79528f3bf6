"""The sandbox: hardened containers (docker, podman) or bubblewrap for agents and the
code they write, with a mount allowlist that holds.

Public surface: the executor backends (``DockerExecutor``, ``BwrapExecutor``) behind the
``jarvisd.executors`` seam, ``executor_for_backend`` (used by
``jarvisd.executors.executor_for``), the mount policy, the runner's command line
(``RUNNER_ARGV``, which ``jarvisd.runs.SandboxedAgent`` starts), ``sweep_orphans``.
A leaf over executors, protocol and netpolicy: it imports no agent and no run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import UsageError
from ._bwrap import BwrapExecutor
from ._docker import DockerChannel, DockerExecutor, connect, engine_address, sweep_orphans
from ._mounts import BLOCKED_PATTERNS, AllowedRoot, Mount, MountPolicy, parse_mount_request
from ._policy import LABEL, SandboxPolicy
from ._runner import RUNNER_ARGV

if TYPE_CHECKING:
    from .._config import Config
    from ..executors import CodeExecutor

__all__ = [
    "BLOCKED_PATTERNS",
    "LABEL",
    "RUNNER_ARGV",
    "AllowedRoot",
    "BwrapExecutor",
    "DockerChannel",
    "DockerExecutor",
    "Mount",
    "MountPolicy",
    "SandboxPolicy",
    "connect",
    "engine_address",
    "executor_for_backend",
    "parse_mount_request",
    "sweep_orphans",
]


def executor_for_backend(name: str, config: Config) -> CodeExecutor:
    """The sandbox executor called ``name``: docker, podman or bwrap (no I/O yet)."""
    if name in ("docker", "podman"):
        return DockerExecutor(config, flavor=name)
    if name == "bwrap":
        return BwrapExecutor(config)
    raise UsageError(f"unknown sandbox backend {name!r} (docker, podman, bwrap or none)")
