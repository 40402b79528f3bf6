"""The one table of failure codes: how every error and run signal crosses a wire.

Daemon replies, task results, the worker's and the sandbox runner's error frames and
``--json`` output all carry a failure as ``(code, message)``. :func:`to_wire` turns an
exception into its code (the most specific class in the table wins, as httpx's
``map_httpcore_exceptions`` does), :func:`from_wire` turns a code back into the
exception to raise, and :func:`exit_code` gives the CLI's exit status for a code. No
reader matches on class names or message text.

Standard library and jarvis's own light modules only: the daemon client imports this.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .._errors import (
    AgentNotInstalled,
    ConfigError,
    DaemonError,
    DaemonUnavailable,
    EngineError,
    EngineResponseError,
    EngineUnavailable,
    ExternalAgentError,
    JarvisError,
    ModelFileError,
    ModelNotFound,
    MountRefused,
    NoAnswer,
    NoChange,
    ProtocolError,
    QueueFull,
    SandboxError,
    SandboxUnavailable,
    SetupFailed,
    ShuttingDown,
    StoreError,
    TaskNotFound,
    TestsCouldNotRun,
    ToolError,
    UsageError,
    WorkspaceError,
)
from .._runcontext import BudgetExceeded, Cancelled

__all__ = ["CODES", "Code", "exit_code", "from_wire", "to_wire"]


@dataclass(frozen=True, slots=True)
class Code:
    code: str
    exception: type[BaseException]
    exit_code: int
    #: Builds the exception from a wire message (default: ``exception(message)``).
    build: Callable[[str], BaseException] | None = None

    def error(self, message: str) -> BaseException:
        return self.build(message) if self.build is not None else self.exception(message)


def _config_error(message: str) -> ConfigError:
    error = ConfigError.__new__(ConfigError)
    Exception.__init__(error, message)
    error.path, error.key, error.expected, error.got = "", "", message, None
    return error


# Ordered from specific to general only for reading: lookup walks the exception's MRO.
CODES: tuple[Code, ...] = (
    Code("usage", UsageError, 2),
    Code("config", ConfigError, 1, _config_error),
    Code("engine_unavailable", EngineUnavailable, 3),
    Code("model_not_found", ModelNotFound, 3),
    Code("model_file", ModelFileError, 3),
    Code("engine_response", EngineResponseError, 1),
    Code("engine", EngineError, 1),
    Code("mount_refused", MountRefused, 2),
    Code("sandbox_unavailable", SandboxUnavailable, 3),
    Code("sandbox", SandboxError, 1),
    Code("tool", ToolError, 1),
    Code("no_answer", NoAnswer, 1),
    Code("protocol", ProtocolError, 1),
    Code("agent_not_installed", AgentNotInstalled, 3),
    Code("external_agent", ExternalAgentError, 1),
    Code("daemon_unavailable", DaemonUnavailable, 3),
    Code("queue_full", QueueFull, 1),
    Code("shutting_down", ShuttingDown, 1),
    Code("store_failed", StoreError, 1),
    Code("not_found", TaskNotFound, 2),
    Code("workspace", WorkspaceError, 1),
    Code("test_error", TestsCouldNotRun, 1),
    Code("no_change", NoChange, 1),
    Code("setup_failed", SetupFailed, 1),
    Code("daemon", DaemonError, 1),
    Code("failed", JarvisError, 1),
    Code("cancelled", Cancelled, 130),
    Code("budget", BudgetExceeded, 1),
)
_BY_CODE = {c.code: c for c in CODES}
_BY_CLASS = {c.exception: c for c in CODES}
#: Codes the daemon's socket layer answers with before any run: their meaning here.
_ALIASES = {
    "bad_request": "usage",
    "frame_too_large": "protocol",
    "version": "protocol",
    "denied": "daemon",
}
INTERNAL = Code("internal", JarvisError, 1)


def _entry(code: str) -> Code:
    return _BY_CODE.get(_ALIASES.get(code, code), INTERNAL)


def to_wire(exc: BaseException) -> tuple[str, str]:
    """The failure code and message that stand for ``exc`` on every wire."""
    for cls in type(exc).__mro__:
        entry = _BY_CLASS.get(cls)
        if entry is not None:
            return entry.code, str(exc) or entry.code
    return INTERNAL.code, f"{type(exc).__name__}: {exc}"


def from_wire(code: str, message: str) -> BaseException:
    """The exception a reader raises for a failure that came over a wire."""
    entry = _entry(code)
    if entry is INTERNAL:
        return JarvisError(message if code == INTERNAL.code else f"{message} ({code})")
    return entry.error(message)


def exit_code(code: str) -> int:
    """The CLI's exit status for a run that failed with ``code``."""
    return _entry(code).exit_code
