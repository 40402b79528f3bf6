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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from jarvisd._errors import ProtocolError
from jarvisd._lazy import lazy_getattr
from jarvisd.protocol import Invalid, Message, wire
from jarvisd.runs import AgentSpec

if TYPE_CHECKING:
    from ._taskwire import (
        DaemonStatus,
        StatusReply,
        TaskAnswer,
        TaskCancel,
        TaskInfo,
        TaskList,
        TaskListReply,
        TaskLogs,
        TaskReply,
        TaskShow,
        TaskSubmit,
        TaskWait,
        Waiting,
    )

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


# -- checks: what a field's type cannot say ------------------------------------------


def _keepalive(value: float | None) -> float | None:
    if value is not None and not 0.05 <= value <= 3600:
        raise Invalid("field 'keepalive' must be between 0.05 and 3600 seconds")
    return value


def _new_spec() -> AgentSpec:
    return AgentSpec(input="")


class _Daemon(Message):
    """The daemon socket's messages: errors are ProtocolError, fields named 'field x'."""

    __slots__ = ()
    _error: ClassVar[type[Exception]] = ProtocolError


# -- requests -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request(_Daemon):
    op: ClassVar[str] = ""
    _head: ClassVar[frozenset[str]] = frozenset({"id"})
    id: str = ""


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
    spec: AgentSpec = wire(factory=_new_spec)
    #: Seconds between ``alive`` replies while the run goes on (None: none), so a
    #: client can tell a slow answer from a daemon that stopped.
    keepalive: float | None = wire(None, check=_keepalive)


@dataclass(frozen=True, slots=True)
class AskCancel(Request):
    """Stop a running ``ask`` (by its request id, which the asking client chose): it
    ends with a ``cancelled`` outcome on its own connection."""

    op: ClassVar[str] = "ask.cancel"
    ask: str = wire("", required=True)
    reason: str = wire("cancelled", check=lambda reason: reason[:500])


REQUESTS: dict[str, type[Request]] = {
    cls.op: cls for cls in (Ping, Status, Shutdown, Ask, AskCancel, UiLogin)
}


# -- replies ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply(_Daemon):
    type: ClassVar[str] = ""
    final: ClassVar[bool] = True
    _head: ClassVar[frozenset[str]] = frozenset({"id"})
    id: str = ""


@dataclass(frozen=True, slots=True)
class Pong(Reply):
    type: ClassVar[str] = "pong"
    pid: int = 0
    version: str = ""


@dataclass(frozen=True, slots=True)
class Ok(Reply):
    type: ClassVar[str] = "ok"
    message: str = ""


@dataclass(frozen=True, slots=True)
class ErrorReply(Reply):
    type: ClassVar[str] = "error"
    code: str = "internal"
    message: str = ""


@dataclass(frozen=True, slots=True)
class Delta(Reply):
    """Streamed answer text (``ask``)."""

    type: ClassVar[str] = "delta"
    final: ClassVar[bool] = False
    text: str = wire("", required=True)


@dataclass(frozen=True, slots=True)
class Alive(Reply):
    """The run goes on (``ask`` with a keepalive): nothing to show yet."""

    type: ClassVar[str] = "alive"
    final: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class EventReply(Reply):
    """One stored task event (``task.logs``) or a live run event (``ask``)."""

    type: ClassVar[str] = "event"
    final: ClassVar[bool] = False
    seq: int = 0
    event: str = wire("", required=True)
    data: Mapping[str, Any] = wire(factory=dict, required=True)
    timestamp: float = 0.0


@dataclass(frozen=True, slots=True)
class ResultReply(Reply):
    type: ClassVar[str] = "result"
    result: Mapping[str, Any] = wire(factory=dict, required=True)  # RunOutcome.to_dict()


REPLIES: dict[str, type[Reply]] = {
    cls.type: cls for cls in (Pong, Ok, ErrorReply, Delta, Alive, EventReply, ResultReply)
}

# -- the task and status messages, in ``_taskwire`` -----------------------------------

#: Their ops and reply types, by class name: `jarvis ask` never builds them, and their
#: dataclasses would cost every question milliseconds before it leaves (a frozen
#: dataclass takes about half a millisecond to create). Loaded on first use: a request
#: or reply of theirs parsed, or a name imported from here.
_TASK_REQUESTS = {
    "task.submit": "TaskSubmit",
    "task.list": "TaskList",
    "task.show": "TaskShow",
    "task.cancel": "TaskCancel",
    "task.answer": "TaskAnswer",
    "task.logs": "TaskLogs",
    "task.wait": "TaskWait",
}
_TASK_REPLIES = {"status": "StatusReply", "task": "TaskReply", "tasks": "TaskListReply"}
_TASK_NAMES = (
    *_TASK_REQUESTS.values(),
    *_TASK_REPLIES.values(),
    "DaemonStatus",
    "TaskInfo",
    "Waiting",
)

__getattr__ = lazy_getattr(__name__, dict.fromkeys(_TASK_NAMES, "jarvisd.daemon._taskwire"))

_M = TypeVar("_M", bound=_Daemon)


def _kind(table: dict[str, type[_M]], later: Mapping[str, str], key: str) -> type[_M] | None:
    """The class for an op or reply type (None: unknown), loading ``_taskwire`` for
    one of its own."""
    found = table.get(key)
    if found is None and key in later:
        found = table[key] = __getattr__(later[key])
    return found


# -- encoding and parsing -----------------------------------------------------------


def encode(message: Request | Reply) -> bytes:
    """One line of the wire format for ``message``."""
    if isinstance(message, Request):
        head: dict[str, Any] = {"v": PROTOCOL_VERSION, "id": message.id, "op": message.op}
    else:
        head = {"v": PROTOCOL_VERSION, "id": message.id, "type": message.type}
        head["final"] = message.final
    data = head | message.body()
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def _depth(value: dict[str, Any]) -> int:
    """How deeply arrays and objects nest in ``value`` (without recursion)."""
    deepest = 0
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, level + 1) for c in children if isinstance(c, dict | list))
    return deepest


def _json(line: bytes | str) -> object:
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
    kind = _kind(REQUESTS, _TASK_REQUESTS, op) if isinstance(op, str) else None
    if kind is None:
        known = ", ".join(sorted({*REQUESTS, *_TASK_REQUESTS}))
        raise ProtocolError(f"unknown op {op!r} (known: {known})")
    return kind.from_body(req_id, data)


def parse_reply(line: bytes | str) -> Reply:
    data = _load(line)
    reply_id, kind = data.get("id", ""), data.get("type")
    if not isinstance(reply_id, str):
        raise ProtocolError("field 'id' must be a string")
    cls = _kind(REPLIES, _TASK_REPLIES, kind) if isinstance(kind, str) else None
    if cls is None:
        raise ProtocolError(f"unknown reply type {kind!r}")
    return cls.from_body(reply_id, data)
