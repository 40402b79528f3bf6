"""The one exception tree of jarvis.

Split by what the caller can do about it::

    JarvisError
    ├── UsageError              bad arguments from a person or a script (exit 2)
    ├── ConfigError             a config file is wrong: names file, key, expectation
    ├── EngineError
    │   ├── EngineUnavailable   nothing answers there: start it or pick another (exit 3)
    │   ├── ModelNotFound       the engine answers but lacks the model
    │   └── EngineResponseError the engine answered with an error or with garbage
    ├── ModelFileError          a model file is missing, partial or fails its hash
    ├── ToolError               a tool could not run (reported to the model, not raised out)
    ├── NoAnswer                a run ended without an answer (unusable replies, max turns)
    ├── PatternError            a composition could not give a result: a member failed
    │                           where none may, a plan was refused, a contract not met
    ├── SandboxError
    │   ├── MountRefused        a mount the allowlist refuses
    │   └── SandboxUnavailable  no container engine / image (exit 3)
    ├── ProtocolError           a malformed frame or message on one of our wires
    ├── ExternalAgentError      an external agent (ACP) failed or refused
    │   └── AgentNotInstalled   its program (node, npm package) is missing (exit 3)
    ├── DaemonError             ``code``: the word the daemon's error reply carries
    │   ├── DaemonUnavailable   no daemon on the socket
    │   ├── QueueFull           the daemon's queue is full: try again later
    │   ├── ShuttingDown        the daemon is stopping: try again after it restarts
    │   └── StoreError          the task database cannot be written or read (disk full,
    │                           damaged file): the message says where and what to do
    ├── TaskNotFound
    ├── WorkspaceError          a ``jarvis code`` workspace cannot be made, found or applied
    ├── TestsCouldNotRun        a ``jarvis code`` run's test command could not run the
    │                           tests (not found, a module missing, a timeout...)
    ├── NoChange                a ``jarvis code`` agent said it changed files, and changed none
    └── SetupFailed             a ``jarvis code`` run's setup (its toolchain, made in the
                                sandbox) failed: the message holds its output's tail

Signals that steer a run are not errors: see ``jarvisd._runcontext`` (``Cancelled``,
``BudgetExceeded`` derive from ``RunStopped``). Third-party errors (httpx, ollama,
docker, sockets) are translated once, where they are caught, with ``raise ... from``.
On a wire (daemon replies, worker and sandbox-runner frames, ``--json``) every error
and signal is a code from the one table in ``jarvisd.runs._failures``.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "AgentNotInstalled",
    "ConfigError",
    "DaemonError",
    "DaemonUnavailable",
    "EngineError",
    "EngineResponseError",
    "EngineUnavailable",
    "ExternalAgentError",
    "JarvisError",
    "ModelFileError",
    "ModelNotFound",
    "MountRefused",
    "NoAnswer",
    "NoChange",
    "PatternError",
    "ProtocolError",
    "QueueFull",
    "SandboxError",
    "SandboxUnavailable",
    "SetupFailed",
    "ShuttingDown",
    "StoreError",
    "TaskNotFound",
    "TestsCouldNotRun",
    "ToolError",
    "UsageError",
    "WorkspaceError",
]


class JarvisError(Exception):
    """Base of every error jarvis raises on purpose."""

    #: Process exit code the CLI uses when this error ends a command.
    exit_code: ClassVar[int] = 1


class UsageError(JarvisError):
    exit_code = 2


class ConfigError(JarvisError):
    """A configuration file (or value) is invalid."""

    def __init__(self, path: str, key: str, expected: str, got: object = None) -> None:
        self.path, self.key, self.expected, self.got = path, key, expected, got
        where = f"{path}: {key}" if key else path
        detail = f"expected {expected}"
        if got is not None:
            detail += f", got {got!r}"
        super().__init__(f"{where}: {detail}")


class EngineError(JarvisError):
    """Base for inference engine failures."""


class EngineUnavailable(EngineError):
    exit_code = 3


class ModelNotFound(EngineError):
    exit_code = 3


class EngineResponseError(EngineError):
    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class ModelFileError(JarvisError):
    exit_code = 3


class ToolError(JarvisError):
    pass


class NoAnswer(JarvisError):
    """The agent ran to its end without an answer to give."""


class PatternError(JarvisError):
    """A composition pattern (jarvisd.patterns) could not produce its result."""


class SandboxError(JarvisError):
    pass


class MountRefused(SandboxError):
    exit_code = 2


class SandboxUnavailable(SandboxError):
    exit_code = 3


class ProtocolError(JarvisError):
    pass


class ExternalAgentError(JarvisError):
    """An external agent failed, exited early or refused a request."""


class AgentNotInstalled(ExternalAgentError):
    """An external agent's program is missing; the message says how to install it."""

    exit_code = 3


class DaemonError(JarvisError):
    code: ClassVar[str] = "failed"


class DaemonUnavailable(DaemonError):
    exit_code = 3


class QueueFull(DaemonError):
    code = "queue_full"


class ShuttingDown(DaemonError):
    code = "shutting_down"


class StoreError(DaemonError):
    code = "store_failed"


class TaskNotFound(JarvisError):
    exit_code = 2


class WorkspaceError(JarvisError):
    """A ``jarvis code`` workspace cannot be made, found, applied or discarded; the
    message says why (an apply that would conflict names the files)."""


class TestsCouldNotRun(JarvisError):
    """The test command of a ``jarvis code`` run could not run the tests (as opposed
    to tests that ran and failed); the message says why."""

    __test__ = False  # not a pytest test class, whatever its name


class NoChange(JarvisError):
    """A ``jarvis code`` agent's summary claims a change, and it changed no file."""


class SetupFailed(JarvisError):
    """A ``jarvis code`` run's setup failed (its command, pip, a host it may not reach):
    the agent never started; the message ends with the tail of the setup's output."""
