"""Where a daemon task's worker runs: the task backend seam.

A backend has one required method, ``spawn``: start a process that speaks the task
worker's frames v1 on its stdin and stdout (``jarvisd.daemon._worker``). The daemon's
side of a task (``TaskRun``) cannot tell the backends apart, so every guarantee of a
local task (events stored before the barrier is answered, cancel, resume) holds for all.

* ``local`` (:class:`LocalBackend`, the default): the worker itself, a child process.
* ``ray`` (:class:`RayBackend`, ``[cluster] backend = "ray"``): a stub child process
  per task, joined to the daemon's one long-lived Ray driver, which places the worker
  on a warm actor of a node by the resources the task needs (:func:`needs`) and carries
  its frames both ways, in order. Ray is imported only in the driver.
"""

from __future__ import annotations

from ._backend import LocalBackend, TaskBackend, backend_for, check_placement
from ._placement import needs
from ._ray import RayBackend

__all__ = ["LocalBackend", "RayBackend", "TaskBackend", "backend_for", "check_placement", "needs"]
