"""The jarvisd socket protocol's task and status messages (see ``_protocol``).

``jarvis task``, ``jarvis daemon status`` and the daemon's task side build and read
these; ``jarvis ask`` never does. They live apart from the envelope and the ``ask``
messages because creating a frozen dataclass costs about half a millisecond (more on
a loaded machine), and `jarvis ask` pays for every module it imports before its
question leaves. ``_protocol`` names them and loads this module on first use, so
``from jarvisd.daemon._protocol import TaskInfo`` and parsing a ``task`` reply still work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from jarvisd.protocol._message import MISSING, Invalid, wire
from jarvisd.runs._spec import AgentSpec

from ._protocol import (
    TASK_STATES,
    TERMINAL_STATES,
    Reply,
    Request,
    _Daemon,
    _keepalive,
    _new_spec,
)

__all__ = [
    "DaemonStatus",
    "StatusReply",
    "TaskAnswer",
    "TaskCancel",
    "TaskInfo",
    "TaskList",
    "TaskListReply",
    "TaskLogs",
    "TaskReply",
    "TaskShow",
    "TaskSubmit",
    "TaskWait",
    "Waiting",
]


# -- checks ---------------------------------------------------------------------------


def _positive_timeout(value: float | None) -> float | None:
    if value is not None and value <= 0:
        raise Invalid("field 'timeout' must be positive")
    return value


def _at_least(key: str, low: int, words: str) -> Callable[[int], int]:
    def check(value: int) -> int:
        if value < low:
            raise Invalid(f"field {key!r} must {words}")
        return value

    return check


def _states(value: object, label: str) -> tuple[str, ...]:
    states = value if value is not MISSING and value else []
    if not isinstance(states, list) or any(s not in TASK_STATES for s in states):
        raise Invalid(f"field 'states' must be a list of {', '.join(TASK_STATES)}")
    return tuple(states)


def _state(value: str) -> str:
    if value not in TASK_STATES:
        raise Invalid(f"unknown task state {value!r}")
    return value


def _pid(value: object, label: str) -> int | None:
    # Shown only (``jarvis task show``): a value that is not a pid is no pid.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# -- requests -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskSubmit(Request):
    op: ClassVar[str] = "task.submit"
    spec: AgentSpec = wire(factory=_new_spec)
    #: Re-run the task when files under this directory change.
    watch: str | None = None
    #: Seconds; None: config ``daemon.task_timeout``.
    timeout: float | None = wire(None, check=_positive_timeout)


@dataclass(frozen=True, slots=True)
class TaskList(Request):
    op: ClassVar[str] = "task.list"
    states: tuple[str, ...] = wire((), read=_states)
    limit: int = wire(100, check=_at_least("limit", 1, "be at least 1"))


@dataclass(frozen=True, slots=True)
class _TaskRef(Request):
    task: str = wire("", required=True)


@dataclass(frozen=True, slots=True)
class TaskShow(_TaskRef):
    op: ClassVar[str] = "task.show"


@dataclass(frozen=True, slots=True)
class TaskCancel(_TaskRef):
    op: ClassVar[str] = "task.cancel"


@dataclass(frozen=True, slots=True)
class TaskAnswer(_TaskRef):
    """``jarvis task approve|deny``: answer the permission request a task waits on."""

    op: ClassVar[str] = "task.answer"
    allow: bool = wire(False, required=True)


@dataclass(frozen=True, slots=True)
class TaskLogs(_TaskRef):
    op: ClassVar[str] = "task.logs"
    #: Replay events with a sequence number greater than this (0: from the start).
    since: int = wire(0, check=_at_least("since", 0, "not be negative"))
    follow: bool = False
    #: While following, ``alive`` this often when no event came (None: never), so a
    #: client can tell a quiet task from a stopped daemon.
    keepalive: float | None = wire(None, check=_keepalive)


@dataclass(frozen=True, slots=True)
class TaskWait(_TaskRef):
    op: ClassVar[str] = "task.wait"
    timeout: float | None = None
    #: ``alive`` this often while the task runs (None: never); see TaskLogs.
    keepalive: float | None = wire(None, check=_keepalive)


# -- typed payloads -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Waiting(_Daemon):
    """The permission request a running task waits on (`jarvis task approve|deny`)."""

    tool: str = wire("", required=True)
    kind: str = wire("", required=True)
    since: float = 0.0
    #: When it is denied unanswered (``agents.approval_timeout``).
    until: float = 0.0


@dataclass(frozen=True, slots=True)
class TaskInfo(_Daemon):
    id: str = wire("", required=True)
    state: str = wire("", required=True, check=_state)
    spec: AgentSpec = wire(factory=_new_spec)
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    #: Why the task ended the way it did (cancel reason, error, interruption).
    reason: str = ""
    result: Mapping[str, Any] | None = None  # RunOutcome.to_dict()
    attempts: int = 0
    watch: str | None = None
    rerun_of: str | None = None
    timeout: float | None = None
    last_seq: int = 0
    checkpoint_turns: int = 0
    #: psutil measurements of the worker process tree (live while running, else last).
    cpu_seconds: float = 0.0
    memory_bytes: int = 0
    worker_pid: int | None = wire(None, read=_pid)
    #: Where it ran: "local", or the Ray node id ("ray" until the cluster placed it).
    node: str = ""
    #: Set while the task waits for its permission request to be answered.
    waiting: Waiting | None = None
    #: What the daemon said on taking the task (a submit's reply only): e.g. that the
    #: Ray cluster cannot be reached, and whether the task waits or runs here.
    notice: str = ""

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES


@dataclass(frozen=True, slots=True)
class DaemonStatus(_Daemon):
    pid: int = 0
    version: str = ""
    protocol: int = 0
    started_at: float = 0.0
    uptime_s: float = 0.0
    running: int = 0
    queued: int = 0
    memory_bytes: int = 0
    max_concurrent: int = 0
    max_queued: int = 0
    socket: str = ""
    config_source: str | None = None
    config_loaded_at: float = 0.0
    #: Why the last config reload was refused (empty: the file in use is the file on disk).
    config_error: str = ""
    watches: int = 0
    tasks_total: int = 0
    #: Why the task store cannot be written (empty: it can); no task starts meanwhile.
    store_error: str = ""
    #: Tasks stopped by that failure, waiting for their state to be stored.
    stalled: int = 0


# -- replies ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StatusReply(Reply):
    type: ClassVar[str] = "status"
    status: DaemonStatus | None = wire(None, required=True)


@dataclass(frozen=True, slots=True)
class TaskReply(Reply):
    type: ClassVar[str] = "task"
    task: TaskInfo | None = wire(None, required=True)


@dataclass(frozen=True, slots=True)
class TaskListReply(Reply):
    type: ClassVar[str] = "tasks"
    tasks: tuple[TaskInfo, ...] = wire((), required=True)
