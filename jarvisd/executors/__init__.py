"""Where agents' code runs: the executor seam and its host-process backend.

Sandboxing backends (docker, podman, bwrap) live in ``jarvisd.sandbox``.
"""

from ._base import (
    Channel,
    Clock,
    CodeExecutor,
    ExecRequest,
    ExecResult,
    receive_frame,
    run_to_completion,
    send_frame,
)
from ._select import executor_for
from ._subprocess import Limits, SubprocessExecutor

__all__ = [
    "Channel",
    "Clock",
    "CodeExecutor",
    "ExecRequest",
    "ExecResult",
    "Limits",
    "SubprocessExecutor",
    "executor_for",
    "receive_frame",
    "run_to_completion",
    "send_frame",
]
