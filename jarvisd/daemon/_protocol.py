"""The jarvisd socket protocol, version 1: typed JSON lines over a Unix socket.

Wire format
-----------
One JSON object per line (UTF-8, ``\\n``-terminated, no raw newlines inside). Every
line carries ``"v": 1``; a peer speaking another version gets an ``error`` reply.

Request (client -> daemon)::

    {"v": 1, "id": "c1", "op": "task.submit", "spec": {...}, "watch": null}

Replies (daemon -> client) carry the request's ``id`` and a ``type``. A request gets
zero or more non-final replies (``delta``, ``event``) and exactly one final reply
(``"final": true``): its answer, or ``error``. Requests on one connection are answered
in order.

========== ==================================== =========================================
op         fields                               replies
========== ==================================== =========================================
ping                                            pong
status                                          status
ask        spec (AgentSpec dict), keepalive? delta*, event*, alive*, result | error
ask.cancel ask (the ask's request id), reason?  ok (the ask ends with a cancelled result)
task.submit spec, watch?, timeout?              task (at once; queued)
task.list  states?, limit?                      tasks
task.show  task                                 task
task.logs  task, since? (seq), follow?,        event*, alive*, then ok (or ended when the
           keepalive?                           task did)
task.wait  task, timeout?, keepalive?           alive*, task (when finished, or at the
                                                timeout)
task.cancel task                                task
task.answer task, allow                         task (answers the approval it waits for)
shutdown                                        ok
========== ==================================== =========================================

Limits: a line longer than ``daemon.max_frame_bytes`` gets ``error`` (code
``frame_too_large``) and the connection is closed; a line that is not JSON, not an
object, nested deeper than ``MAX_DEPTH``, or not a valid request gets ``error``
(``bad_request``) and the connection stays usable. Error codes are those of
``jarvisd.runs._failures`` (the one table), plus the socket layer's bad_request,
frame_too_large, version and denied. A run that ends without an answer is not an
``error``: its ``result`` (a ``RunOutcome``) says why.

Everything is parsed here, once, into the dataclasses below; the server and the client
never handle loose dicts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from jarvisd._errors import JarvisError, ProtocolError
from jarvisd.runs import AgentSpec

__all__ = [
    "CHECKPOINT_EVENT",
    "PROTOCOL_VERSION",
    "TERMINAL_STATES",
    "Alive",
    "Ask",
    "AskCancel",
    "DaemonStatus",
    "Delta",
    "ErrorReply",
    "EventReply",
    "Ok",
    "Ping",
    "Pong",
    "Reply",
    "Request",
    "ResultReply",
    "Shutdown",
    "Status",
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
    "UiLogin",
    "Waiting",
    "encode",
    "parse_reply",
    "parse_request",
]

PROTOCOL_VERSION = 1

#: How deeply arrays and objects may nest in a request. Real requests need a handful of
#: levels; deeper only costs stack, here and in every later parser (the worker's).
#: Replies are not held to it (they carry what runs reported), only to the stack.
MAX_DEPTH = 64

#: Task states. ``queued`` and ``running`` are live; the rest are final.
TASK_STATES = ("queued", "running", "succeeded", "failed", "cancelled", "interrupted")
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled", "interrupted"})
#: The worker's event carrying a resumable state after each completed model turn (stored
#: as the task's checkpoint, never as an event).
CHECKPOINT_EVENT = "checkpoint"


# -- field readers: one place that turns loose JSON into typed values ---------------


def _str(data: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise ProtocolError(f"field {key!r} must be a string")
    return value


def _opt_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ProtocolError(f"field {key!r} must be a string or null")
    return value


def _int(data: Mapping[str, Any], key: str, default: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"field {key!r} must be an integer")
    return value


def _opt_float(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ProtocolError(f"field {key!r} must be a number or null")
    return float(value)


def _float(data: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    value = _opt_float(data, key)
    return default if value is None else value


def _bool(data: Mapping[str, Any], key: str, default: bool = False) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ProtocolError(f"field {key!r} must be true or false")
    return value


def _obj(data: Mapping[str, Any], key: str, required: bool = True) -> dict[str, Any] | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, dict):
        raise ProtocolError(f"field {key!r} must be an object")
    return value


def _spec(data: Mapping[str, Any]) -> AgentSpec:
    raw = _obj(data, "spec")
    assert raw is not None
    try:
        return AgentSpec.from_dict(raw)
    except (TypeError, ValueError, JarvisError) as exc:
        raise ProtocolError(f"invalid spec: {exc}") from exc


# -- requests -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    op: ClassVar[str] = ""
    id: str = ""

    def body(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> Request:
        return cls(id=id)


@dataclass(frozen=True, slots=True)
class Ping(Request):
    op: ClassVar[str] = "ping"


@dataclass(frozen=True, slots=True)
class Status(Request):
    op: ClassVar[str] = "status"


@dataclass(frozen=True, slots=True)
class Shutdown(Request):
    op: ClassVar[str] = "shutdown"


@dataclass(frozen=True, slots=True)
class UiLogin(Request):
    """``jarvis ui``: a login URL for the web console, with a new one-time token
    (answered with ``Ok``, the URL as its message)."""

    op: ClassVar[str] = "ui.login"


@dataclass(frozen=True, slots=True)
class Ask(Request):
    op: ClassVar[str] = "ask"
    spec: AgentSpec = field(default_factory=lambda: AgentSpec(input=""))
    #: Seconds between ``alive`` replies while the run goes on (None: none), so a
    #: client can tell a slow answer from a daemon that stopped.
    keepalive: float | None = None

    def body(self) -> dict[str, Any]:
        return {"spec": self.spec.to_dict(), "keepalive": self.keepalive}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> Ask:
        return cls(id=id, spec=_spec(data), keepalive=_keepalive(data))


@dataclass(frozen=True, slots=True)
class AskCancel(Request):
    """Stop a running ``ask`` (by its request id, which the asking client chose): it
    ends with a ``cancelled`` outcome on its own connection."""

    op: ClassVar[str] = "ask.cancel"
    ask: str = ""
    reason: str = "cancelled"

    def body(self) -> dict[str, Any]:
        return {"ask": self.ask, "reason": self.reason}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> AskCancel:
        return cls(id=id, ask=_str(data, "ask"), reason=_str(data, "reason", "cancelled")[:500])


@dataclass(frozen=True, slots=True)
class TaskSubmit(Request):
    op: ClassVar[str] = "task.submit"
    spec: AgentSpec = field(default_factory=lambda: AgentSpec(input=""))
    #: Re-run the task when files under this directory change.
    watch: str | None = None
    #: Seconds; None: config ``daemon.task_timeout``.
    timeout: float | None = None

    def body(self) -> dict[str, Any]:
        return {"spec": self.spec.to_dict(), "watch": self.watch, "timeout": self.timeout}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> TaskSubmit:
        timeout = _opt_float(data, "timeout")
        if timeout is not None and timeout <= 0:
            raise ProtocolError("field 'timeout' must be positive")
        return cls(id=id, spec=_spec(data), watch=_opt_str(data, "watch"), timeout=timeout)


@dataclass(frozen=True, slots=True)
class TaskList(Request):
    op: ClassVar[str] = "task.list"
    states: tuple[str, ...] = ()
    limit: int = 100

    def body(self) -> dict[str, Any]:
        return {"states": list(self.states), "limit": self.limit}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> TaskList:
        states = data.get("states") or []
        if not isinstance(states, list) or any(s not in TASK_STATES for s in states):
            raise ProtocolError(f"field 'states' must be a list of {', '.join(TASK_STATES)}")
        limit = _int(data, "limit", 100)
        if limit < 1:
            raise ProtocolError("field 'limit' must be at least 1")
        return cls(id=id, states=tuple(states), limit=limit)


@dataclass(frozen=True, slots=True)
class _TaskRef(Request):
    task: str = ""

    def body(self) -> dict[str, Any]:
        return {"task": self.task}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> _TaskRef:
        return cls(id=id, task=_str(data, "task"))


@dataclass(frozen=True, slots=True)
class TaskShow(_TaskRef):
    op: ClassVar[str] = "task.show"


@dataclass(frozen=True, slots=True)
class TaskCancel(_TaskRef):
    op: ClassVar[str] = "task.cancel"


@dataclass(frozen=True, slots=True)
class TaskAnswer(Request):
    """``jarvis task approve|deny``: answer the permission request a task waits on."""

    op: ClassVar[str] = "task.answer"
    task: str = ""
    allow: bool = False

    def body(self) -> dict[str, Any]:
        return {"task": self.task, "allow": self.allow}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> TaskAnswer:
        if not isinstance(data.get("allow"), bool):
            raise ProtocolError("field 'allow' must be true or false")
        return cls(id=id, task=_str(data, "task"), allow=_bool(data, "allow"))


@dataclass(frozen=True, slots=True)
class TaskLogs(Request):
    op: ClassVar[str] = "task.logs"
    task: str = ""
    #: Replay events with a sequence number greater than this (0: from the start).
    since: int = 0
    follow: bool = False
    #: While following, ``alive`` this often when no event came (None: never), so a
    #: client can tell a quiet task from a stopped daemon.
    keepalive: float | None = None

    def body(self) -> dict[str, Any]:
        return {"task": self.task, "since": self.since, "follow": self.follow,
                "keepalive": self.keepalive}  # fmt: skip

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> TaskLogs:
        since = _int(data, "since", 0)
        if since < 0:
            raise ProtocolError("field 'since' must not be negative")
        return cls(id=id, task=_str(data, "task"), since=since, follow=_bool(data, "follow"),
                   keepalive=_keepalive(data))  # fmt: skip


@dataclass(frozen=True, slots=True)
class TaskWait(Request):
    op: ClassVar[str] = "task.wait"
    task: str = ""
    timeout: float | None = None
    #: ``alive`` this often while the task runs (None: never); see TaskLogs.
    keepalive: float | None = None

    def body(self) -> dict[str, Any]:
        return {"task": self.task, "timeout": self.timeout, "keepalive": self.keepalive}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> TaskWait:
        return cls(id=id, task=_str(data, "task"), timeout=_opt_float(data, "timeout"),
                   keepalive=_keepalive(data))  # fmt: skip


def _keepalive(data: Mapping[str, Any]) -> float | None:
    keepalive = _opt_float(data, "keepalive")
    if keepalive is not None and not 0.05 <= keepalive <= 3600:
        raise ProtocolError("field 'keepalive' must be between 0.05 and 3600 seconds")
    return keepalive


REQUESTS: dict[str, type[Request]] = {
    cls.op: cls
    for cls in (Ping, Status, Shutdown, Ask, AskCancel, TaskSubmit, TaskList, TaskShow,
                TaskCancel, TaskAnswer, TaskLogs, TaskWait, UiLogin)
}  # fmt: skip


# -- typed payloads -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Waiting:
    """The permission request a running task waits on (`jarvis task approve|deny`)."""

    tool: str
    kind: str
    since: float
    #: When it is denied unanswered (``agents.approval_timeout``).
    until: float

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "kind": self.kind, "since": self.since, "until": self.until}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Waiting:
        return cls(tool=_str(data, "tool"), kind=_str(data, "kind"),
                   since=_float(data, "since"), until=_float(data, "until"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class TaskInfo:
    id: str
    state: str
    spec: AgentSpec
    created_at: float
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
    worker_pid: int | None = None
    #: Set while the task waits for its permission request to be answered.
    waiting: Waiting | None = None

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "spec": self.spec.to_dict(),
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "reason": self.reason,
            "result": None if self.result is None else dict(self.result),
            "attempts": self.attempts,
            "watch": self.watch,
            "rerun_of": self.rerun_of,
            "timeout": self.timeout,
            "last_seq": self.last_seq,
            "checkpoint_turns": self.checkpoint_turns,
            "cpu_seconds": self.cpu_seconds,
            "memory_bytes": self.memory_bytes,
            "worker_pid": self.worker_pid,
            "waiting": None if self.waiting is None else self.waiting.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskInfo:
        state = _str(data, "state")
        if state not in TASK_STATES:
            raise ProtocolError(f"unknown task state {state!r}")
        pid = data.get("worker_pid")
        waiting = _obj(data, "waiting", required=False)
        return cls(
            id=_str(data, "id"),
            state=state,
            spec=_spec(data),
            created_at=_float(data, "created_at"),
            started_at=_opt_float(data, "started_at"),
            finished_at=_opt_float(data, "finished_at"),
            reason=_str(data, "reason", ""),
            result=_obj(data, "result", required=False),
            attempts=_int(data, "attempts", 0),
            watch=_opt_str(data, "watch"),
            rerun_of=_opt_str(data, "rerun_of"),
            timeout=_opt_float(data, "timeout"),
            last_seq=_int(data, "last_seq", 0),
            checkpoint_turns=_int(data, "checkpoint_turns", 0),
            cpu_seconds=_float(data, "cpu_seconds"),
            memory_bytes=_int(data, "memory_bytes", 0),
            worker_pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
            waiting=None if waiting is None else Waiting.from_dict(waiting),
        )


@dataclass(frozen=True, slots=True)
class DaemonStatus:
    pid: int
    version: str
    protocol: int
    started_at: float
    uptime_s: float
    running: int
    queued: int
    memory_bytes: int
    max_concurrent: int
    max_queued: int
    socket: str
    config_source: str | None
    config_loaded_at: float
    #: Why the last config reload was refused (empty: the file in use is the file on disk).
    config_error: str = ""
    watches: int = 0
    tasks_total: int = 0
    #: Why the task store cannot be written (empty: it can); no task starts meanwhile.
    store_error: str = ""
    #: Tasks stopped by that failure, waiting for their state to be stored.
    stalled: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "version": self.version,
            "protocol": self.protocol,
            "started_at": self.started_at,
            "uptime_s": self.uptime_s,
            "running": self.running,
            "queued": self.queued,
            "memory_bytes": self.memory_bytes,
            "max_concurrent": self.max_concurrent,
            "max_queued": self.max_queued,
            "socket": self.socket,
            "config_source": self.config_source,
            "config_loaded_at": self.config_loaded_at,
            "config_error": self.config_error,
            "watches": self.watches,
            "tasks_total": self.tasks_total,
            "store_error": self.store_error,
            "stalled": self.stalled,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DaemonStatus:
        return cls(
            pid=_int(data, "pid", 0),
            version=_str(data, "version", ""),
            protocol=_int(data, "protocol", 0),
            started_at=_float(data, "started_at"),
            uptime_s=_float(data, "uptime_s"),
            running=_int(data, "running", 0),
            queued=_int(data, "queued", 0),
            memory_bytes=_int(data, "memory_bytes", 0),
            max_concurrent=_int(data, "max_concurrent", 0),
            max_queued=_int(data, "max_queued", 0),
            socket=_str(data, "socket", ""),
            config_source=_opt_str(data, "config_source"),
            config_loaded_at=_float(data, "config_loaded_at"),
            config_error=_str(data, "config_error", ""),
            watches=_int(data, "watches", 0),
            tasks_total=_int(data, "tasks_total", 0),
            store_error=_str(data, "store_error", ""),
            stalled=_int(data, "stalled", 0),
        )


# -- replies ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    type: ClassVar[str] = ""
    final: ClassVar[bool] = True
    id: str = ""

    def body(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> Reply:
        return cls(id=id)


@dataclass(frozen=True, slots=True)
class Pong(Reply):
    type: ClassVar[str] = "pong"
    pid: int = 0
    version: str = ""

    def body(self) -> dict[str, Any]:
        return {"pid": self.pid, "version": self.version}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> Pong:
        return cls(id=id, pid=_int(data, "pid", 0), version=_str(data, "version", ""))


@dataclass(frozen=True, slots=True)
class Ok(Reply):
    type: ClassVar[str] = "ok"
    message: str = ""

    def body(self) -> dict[str, Any]:
        return {"message": self.message}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> Ok:
        return cls(id=id, message=_str(data, "message", ""))


@dataclass(frozen=True, slots=True)
class ErrorReply(Reply):
    type: ClassVar[str] = "error"
    code: str = "internal"
    message: str = ""

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> ErrorReply:
        return cls(id=id, code=_str(data, "code", "internal"), message=_str(data, "message", ""))


@dataclass(frozen=True, slots=True)
class StatusReply(Reply):
    type: ClassVar[str] = "status"
    status: DaemonStatus | None = None

    def body(self) -> dict[str, Any]:
        return {"status": None if self.status is None else self.status.to_dict()}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> StatusReply:
        raw = _obj(data, "status")
        assert raw is not None
        return cls(id=id, status=DaemonStatus.from_dict(raw))


@dataclass(frozen=True, slots=True)
class Delta(Reply):
    """Streamed answer text (``ask``)."""

    type: ClassVar[str] = "delta"
    final: ClassVar[bool] = False
    text: str = ""

    def body(self) -> dict[str, Any]:
        return {"text": self.text}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> Delta:
        return cls(id=id, text=_str(data, "text"))


@dataclass(frozen=True, slots=True)
class Alive(Reply):
    """The run goes on (``ask`` with a keepalive): nothing to show yet."""

    type: ClassVar[str] = "alive"
    final: ClassVar[bool] = False

    def body(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> Alive:
        return cls(id=id)


@dataclass(frozen=True, slots=True)
class EventReply(Reply):
    """One stored task event (``task.logs``) or a live run event (``ask``)."""

    type: ClassVar[str] = "event"
    final: ClassVar[bool] = False
    seq: int = 0
    event: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    timestamp: float = 0.0

    def body(self) -> dict[str, Any]:
        return {"seq": self.seq, "event": self.event, "data": dict(self.data),
                "timestamp": self.timestamp}  # fmt: skip

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> EventReply:
        return cls(
            id=id,
            seq=_int(data, "seq", 0),
            event=_str(data, "event"),
            data=_obj(data, "data") or {},
            timestamp=_float(data, "timestamp"),
        )


@dataclass(frozen=True, slots=True)
class ResultReply(Reply):
    type: ClassVar[str] = "result"
    result: Mapping[str, Any] = field(default_factory=dict)  # RunOutcome.to_dict()

    def body(self) -> dict[str, Any]:
        return {"result": dict(self.result)}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> ResultReply:
        return cls(id=id, result=_obj(data, "result") or {})


@dataclass(frozen=True, slots=True)
class TaskReply(Reply):
    type: ClassVar[str] = "task"
    task: TaskInfo | None = None

    def body(self) -> dict[str, Any]:
        return {"task": None if self.task is None else self.task.to_dict()}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> TaskReply:
        raw = _obj(data, "task")
        assert raw is not None
        return cls(id=id, task=TaskInfo.from_dict(raw))


@dataclass(frozen=True, slots=True)
class TaskListReply(Reply):
    type: ClassVar[str] = "tasks"
    tasks: tuple[TaskInfo, ...] = ()

    def body(self) -> dict[str, Any]:
        return {"tasks": [t.to_dict() for t in self.tasks]}

    @classmethod
    def from_body(cls, id: str, data: Mapping[str, Any]) -> TaskListReply:
        raw = data.get("tasks")
        if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
            raise ProtocolError("field 'tasks' must be a list of objects")
        return cls(id=id, tasks=tuple(TaskInfo.from_dict(t) for t in raw))


REPLIES: dict[str, type[Reply]] = {
    cls.type: cls
    for cls in (Pong, Ok, ErrorReply, StatusReply, Delta, Alive, EventReply, ResultReply,
                TaskReply, TaskListReply)
}  # fmt: skip


# -- encoding and parsing -----------------------------------------------------------


def encode(message: Request | Reply) -> bytes:
    """One line of the wire format for ``message``."""
    if isinstance(message, Request):
        head: dict[str, Any] = {"v": PROTOCOL_VERSION, "id": message.id, "op": message.op}
    else:
        head = {"v": PROTOCOL_VERSION, "id": message.id, "type": message.type,
                "final": message.final}  # fmt: skip
    data = head | message.body()
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in ``value`` (without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, level + 1) for c in children if isinstance(c, dict | list))
    return deepest


def _json(line: bytes | str) -> Any:
    try:
        return json.loads(line)
    except RecursionError:  # deeper than the interpreter's stack: a protocol error too
        raise ProtocolError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not valid JSON: {exc}") from exc


def _load(line: bytes | str, max_depth: int | None = None) -> dict[str, Any]:
    data = _json(line)
    if not isinstance(data, dict):
        raise ProtocolError("a frame must be a JSON object")
    if max_depth is not None and _depth(data) > max_depth:
        raise ProtocolError(f"JSON nested deeper than {max_depth} levels")
    version = data.get("v")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol version {version!r} is not supported (jarvisd speaks {PROTOCOL_VERSION})"
        )
    return data


def request_id(line: bytes | str) -> str:
    """Best-effort id of a request line that failed to parse (for the error reply)."""
    try:
        data = _json(line)
    except ProtocolError:
        return ""
    value = data.get("id") if isinstance(data, dict) else None
    return value if isinstance(value, str) else ""


def parse_request(line: bytes | str) -> Request:
    """Parse one request line. Raises ProtocolError with a message fit for the client."""
    data = _load(line, MAX_DEPTH)
    req_id, op = data.get("id", ""), data.get("op")
    if not isinstance(req_id, str):
        raise ProtocolError("field 'id' must be a string")
    if not isinstance(op, str) or op not in REQUESTS:
        raise ProtocolError(f"unknown op {op!r} (known: {', '.join(sorted(REQUESTS))})")
    return REQUESTS[op].from_body(req_id, data)


def parse_reply(line: bytes | str) -> Reply:
    data = _load(line)
    reply_id, kind = data.get("id", ""), data.get("type")
    if not isinstance(reply_id, str):
        raise ProtocolError("field 'id' must be a string")
    if not isinstance(kind, str) or kind not in REPLIES:
        raise ProtocolError(f"unknown reply type {kind!r}")
    return REPLIES[kind].from_body(reply_id, data)
