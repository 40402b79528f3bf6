"""Choosing the code executor from config ``sandbox.backend``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import SandboxUnavailable, UsageError
from .._plugins import PluginError, import_from_string
from ._base import CodeExecutor

if TYPE_CHECKING:
    from .._config import Config

__all__ = ["BACKENDS", "executor_for"]


#: Sandbox backends as lazy "module:attr" factories ``(config) -> CodeExecutor``: the
#: executor seam never imports the sandbox package (which builds on it).
BACKENDS = {
    "docker": "jarvisd.sandbox._docker:DockerExecutor",
    "podman": "jarvisd.sandbox._docker:podman_executor",
    "bwrap": "jarvisd.sandbox._bwrap:BwrapExecutor",
}


def executor_for(config: Config) -> CodeExecutor:
    """``none``: the host-process executor (not isolated; warns on every run);
    ``docker``/``podman``/``bwrap``: the sandbox backend of that name."""
    backend = config.sandbox.backend
    if backend == "none":
        from ._subprocess import SubprocessExecutor

        return SubprocessExecutor(warn=True)
    if backend not in BACKENDS:
        raise UsageError(f"unknown sandbox backend {backend!r} ({', '.join(BACKENDS)} or none)")
    try:
        factory = import_from_string(BACKENDS[backend])
    except PluginError as exc:
        raise SandboxUnavailable(
            f"sandbox backend {backend!r} is not available in this installation ({exc}); "
            'set sandbox.backend = "none" to run code as a host process (not isolated)'
        ) from exc
    executor = factory(config)
    if not isinstance(executor, CodeExecutor):
        raise SandboxUnavailable(f"sandbox backend {backend!r} did not return a CodeExecutor")
    return executor
