"""Choosing the code executor from config ``sandbox.backend``."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .._errors import SandboxUnavailable
from ._base import CodeExecutor

if TYPE_CHECKING:
    from .._config import Config

__all__ = ["executor_for"]


def executor_for(config: Config) -> CodeExecutor:
    """``none``: the host-process executor (not isolated; warns on every run);
    ``docker``/``podman``/``bwrap``: the sandbox backend of that name."""
    backend = config.sandbox.backend
    if backend == "none":
        from ._subprocess import SubprocessExecutor

        return SubprocessExecutor(warn=True)
    try:
        sandbox = importlib.import_module("jarvisd.sandbox")
        factory = sandbox.executor_for_backend
    except (ImportError, AttributeError) as exc:
        raise SandboxUnavailable(
            f"sandbox backend {backend!r} is not available in this installation ({exc}); "
            'set sandbox.backend = "none" to run code as a host process (not isolated)'
        ) from exc
    executor = factory(backend, config)
    if not isinstance(executor, CodeExecutor):
        raise SandboxUnavailable(f"sandbox backend {backend!r} did not return a CodeExecutor")
    return executor
