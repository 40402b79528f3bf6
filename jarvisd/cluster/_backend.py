"""The task backend seam and the local backend (see the package docstring)."""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from jarvisd._config import Config
    from jarvisd.runs import AgentSpec

__all__ = ["LocalBackend", "TaskBackend", "backend_for", "check_placement"]

#: The worker's module: ``python -m`` it, on whichever machine runs the task.
WORKER_MODULE = "jarvisd.daemon._worker"


class TaskBackend(Protocol):
    """Where a task's worker runs: ``spawn`` is the one required method; a backend
    may also refuse tasks at submit with ``check(spec, config)`` (:func:`check_placement`)."""

    #: What ``task show`` says while the task has no node yet ("local", "ray").
    name: str

    async def spawn(
        self, python: str, spec: AgentSpec, config: Config, limit: int
    ) -> asyncio.subprocess.Process:
        """Start a child process that speaks the worker's frames on stdin/stdout
        (lines up to ``limit`` bytes): the worker itself, or a stand-in for it."""
        ...


def check_placement(backend: TaskBackend, spec: AgentSpec, config: Config) -> str:
    """Refuse (``UsageError``) at submit a task no worker of ``backend`` could run,
    through its optional ``check(spec, config)``; a backend without one refuses none.
    Returns what the submit should say besides ("" or, e.g., the cluster is down)."""
    check = getattr(backend, "check", None)
    return (check(spec, config) or "") if check is not None else ""


class LocalBackend:
    """The worker as a child process of the daemon, on this machine."""

    name = "local"

    async def spawn(
        self, python: str, spec: AgentSpec, config: Config, limit: int
    ) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            python,
            "-m",
            WORKER_MODULE,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,  # the terminal's ^C is the daemon's, not the tasks'
            limit=limit,
        )


def backend_for(config: Config) -> TaskBackend:
    """The backend ``[cluster]`` names: one per cluster setting, so what it caches
    (the ray backend's listing of nodes) outlives a task, and a config reload that
    changes the section takes effect at the next task."""
    return _backend(config.cluster.backend, config.cluster.address)


@functools.lru_cache(maxsize=4)
def _backend(kind: str, address: str) -> TaskBackend:
    if kind == "ray":
        from ._ray import RayBackend

        return RayBackend(address)
    return LocalBackend()
