"""The jarvis frame protocol, version 1: typed JSON frames over a byte stream.

Used wherever jarvis talks to a program across a process boundary: the in-container
sandbox runner, the RLM REPL process, external agents (the Node.js bridge, OpenHands).
Standard library only, so it runs inside a bare python3 container.

Wire format
-----------
One frame per line::

    @@jarvis:1@@ {"kind": "...", "id": "...", ...}\\n

* The sentinel ``@@jarvis:1@@ `` starts a frame; ``\\n`` ends it. The JSON is encoded
  with ``ensure_ascii``, so it never contains a raw newline.
* A line without the sentinel is not a frame: it is program output (a library that
  prints), kept as ``noise`` and never parsed as data.
* A frame longer than ``max_bytes`` (default 8 MiB), a sentinel line whose JSON does not
  parse, or an unknown ``kind`` is a :class:`FrameError`. A different version number
  in the sentinel is refused with a clear message.
* ``id`` pairs a reply with its request (``infer`` -> ``infer_result``, ``tool`` ->
  ``tool_result``).

Kinds
-----
host -> program: ``start`` (the payload: what to run), ``infer_result``, ``cancel``,
``approval`` (the answer to ``approve``, same id), ``tool_result``
program -> host: ``infer`` (ask the host's engine), ``tool`` (run a tool the host
offered), ``event``, ``checkpoint`` (its loop's state, for a resume), ``result``,
``error``, ``log``, ``approve`` (ask a person to allow a tool); either way:
``ping``/``pong`` (a ``pong`` says every frame before the ``ping`` was handled).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar

from ._message import (
    Message,
    boolean,
    loose,
    mapping,
    optional_loose,
    optional_mapping,
    raw,
    string,
    wire,
)

__all__ = [
    "MAX_FRAME_BYTES",
    "PROTOCOL_VERSION",
    "SENTINEL",
    "Approval",
    "Approve",
    "Cancel",
    "Checkpoint",
    "ErrorFrame",
    "EventFrame",
    "Frame",
    "FrameError",
    "FrameReader",
    "Infer",
    "InferResult",
    "Log",
    "Ping",
    "Pong",
    "ResultFrame",
    "Start",
    "ToolFrame",
    "ToolResultFrame",
    "decode_line",
    "encode",
    "jsonable",
]

PROTOCOL_VERSION = 1
SENTINEL = f"@@jarvis:{PROTOCOL_VERSION}@@ "
_SENTINEL_PREFIX = "@@jarvis:"
MAX_FRAME_BYTES = 8 * 1024 * 1024


class FrameError(ValueError):
    """A malformed, oversized or unknown frame. (The host maps it to ProtocolError.)"""


def _new_id() -> str:
    return uuid.uuid4().hex[:16]


# Each field's reader is the one its node_bridge/frames.mjs twin uses (same name, same
# rule), so that both sides accept and refuse the same frames.
_text = string()
_object = mapping(absent="falsy")


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame(Message):
    kind: ClassVar[str] = ""
    _error: ClassVar[type[Exception]] = FrameError
    _head: ClassVar[frozenset[str]] = frozenset({"id"})
    id: str = field(default_factory=_new_id)

    @classmethod
    def _label(cls, key: str) -> str:
        return f"frame field {key!r}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Start(Frame):
    """What to run: ``task`` names the job (e.g. "agent", "exec", "repl"); ``payload``
    is its input. Secrets travel here, never in argv or the environment."""

    kind: ClassVar[str] = "start"
    task: str = wire("", read=_text)
    payload: Mapping[str, Any] = wire(factory=dict, read=_object)


@dataclass(frozen=True, slots=True, kw_only=True)
class Infer(Frame):
    """Ask the host to run one generation. ``request`` holds messages/tools/options as
    the ``to_dict`` forms of jarvisd._messages."""

    kind: ClassVar[str] = "infer"
    request: Mapping[str, Any] = wire(factory=dict, read=_object)


@dataclass(frozen=True, slots=True, kw_only=True)
class InferResult(Frame):
    """The host's answer to ``infer`` (same id): a generation, or an error message."""

    kind: ClassVar[str] = "infer_result"
    generation: Mapping[str, Any] | None = wire(
        None, read=optional_mapping(label="infer_result.generation")
    )
    error: str | None = wire(None, read=optional_loose)

    def body(self) -> dict[str, Any]:
        # An empty generation is no generation (node_bridge/ decodes it so).
        return {"generation": dict(self.generation or {}) or None, "error": self.error}


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolFrame(Frame):
    """Ask the host to run ``tool``, one of the tools it offered the program, with
    ``arguments`` (a JSON object: never a list, nor a falsy stand-in)."""

    kind: ClassVar[str] = "tool"
    tool: str = wire("", read=_text)
    arguments: Mapping[str, Any] = wire(factory=dict, read=mapping(label="tool.arguments"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultFrame(Frame):
    """The host's answer to ``tool`` (same id): the result's text, and whether the tool
    succeeded (a refusal or a failure is ``success`` false, its text says why)."""

    kind: ClassVar[str] = "tool_result"
    content: str = wire("", read=_text)
    success: bool = wire(False, read=boolean(required=True, label="tool_result.success"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancel(Frame):
    kind: ClassVar[str] = "cancel"
    reason: str = wire("", read=loose(""))


@dataclass(frozen=True, slots=True, kw_only=True)
class EventFrame(Frame):
    kind: ClassVar[str] = "event"
    type: str = wire("", read=_text)
    data: Mapping[str, Any] = wire(factory=dict, read=_object)


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint(Frame):
    """The program's loop state after a completed turn (``RunContext.checkpoint``): the
    host records it with the run, and the start frame of a resumed run carries it back
    (``payload["resume"]``). The host never reads inside it: it is the program's."""

    kind: ClassVar[str] = "checkpoint"
    state: Mapping[str, Any] = wire(factory=dict, read=_object)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultFrame(Frame):
    """The program's final answer (for agents: an AgentResult's ``to_dict``)."""

    kind: ClassVar[str] = "result"
    result: Mapping[str, Any] = wire(factory=dict, read=_object)


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorFrame(Frame):
    """The program failed: ``code`` is a short machine-readable word."""

    kind: ClassVar[str] = "error"
    code: str = wire("error", read=loose("error"))
    message: str = wire("", read=loose(""))


@dataclass(frozen=True, slots=True, kw_only=True)
class Log(Frame):
    kind: ClassVar[str] = "log"
    level: str = wire("info", read=loose("info"))
    message: str = wire("", read=loose(""))


@dataclass(frozen=True, slots=True, kw_only=True)
class Approve(Frame):
    """Ask whoever answers for the run whether a tool may run: its title, its ACP kind
    and arguments (shown to the person, never acted on by the host)."""

    kind: ClassVar[str] = "approve"
    tool: str = wire("", read=_text)
    tool_kind: str = wire("", read=_text)
    arguments: Any = wire(None, read=raw)


@dataclass(frozen=True, slots=True, kw_only=True)
class Approval(Frame):
    """The answer to ``approve`` (same id): allowed or not, and who or what decided."""

    kind: ClassVar[str] = "approval"
    allowed: bool = wire(False, read=boolean(required=True, label="approval.allowed"))
    reason: str = wire("", read=_text)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ping(Frame):
    kind: ClassVar[str] = "ping"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pong(Frame):
    kind: ClassVar[str] = "pong"


KINDS: dict[str, type[Frame]] = {
    cls.kind: cls
    for cls in (
        Start,
        Infer,
        InferResult,
        ToolFrame,
        ToolResultFrame,
        Cancel,
        EventFrame,
        Checkpoint,
        ResultFrame,
        ErrorFrame,
        Log,
        Approve,
        Approval,
        Ping,
        Pong,
    )
}


def jsonable(value: Any) -> Any:
    """``value`` made safe for a frame's JSON: objects JSON cannot hold become their text
    (a tool's metadata, an event's payload), so sending never fails on them."""
    return json.loads(json.dumps(value, default=str))


def encode(frame: Frame) -> bytes:
    data = {"kind": frame.kind, "id": frame.id, **frame.body()}
    return (SENTINEL + json.dumps(data, ensure_ascii=True, separators=(",", ":")) + "\n").encode()


def decode_line(line: str | bytes, max_bytes: int = MAX_FRAME_BYTES) -> Frame | None:
    """Parse one line: a Frame, or None when the line is not a frame (program output)."""
    if len(line) > max_bytes:
        raise FrameError(f"frame of {len(line)} bytes exceeds the limit of {max_bytes}")
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            return None
    line = line.rstrip("\r\n")
    if not line.startswith(_SENTINEL_PREFIX):
        return None
    if not line.startswith(SENTINEL):
        version = line[len(_SENTINEL_PREFIX) :].split("@@", 1)[0]
        raise FrameError(
            f"frame protocol version {version!r} is not supported (this side speaks "
            f"{PROTOCOL_VERSION})"
        )
    try:
        data = json.loads(line[len(SENTINEL) :])
    except RecursionError:  # nested deeper than the stack: hostile, never a crash
        raise FrameError("frame JSON is nested too deeply") from None
    except ValueError as exc:
        raise FrameError(f"frame is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise FrameError("frame must be a JSON object")
    kind, frame_id = data.get("kind"), data.get("id")
    if not isinstance(kind, str) or kind not in KINDS:
        raise FrameError(f"unknown frame kind {kind!r}")
    if not isinstance(frame_id, str) or not frame_id:
        raise FrameError("frame needs a non-empty string id")
    return KINDS[kind].from_body(frame_id, data)


class FrameReader:
    """Reads frames from a binary stream; non-frame lines are collected in ``noise``
    (bounded), so a chatty program cannot corrupt the protocol or exhaust memory."""

    def __init__(
        self, stream: IO[bytes], max_bytes: int = MAX_FRAME_BYTES, noise_limit: int = 65536
    ):
        self.stream = stream
        self.max_bytes = max_bytes
        self.noise_limit = noise_limit
        self.noise: list[str] = []
        self._noise_size = 0

    def __iter__(self) -> Iterator[Frame]:
        while True:
            frame = self.read()
            if frame is None:
                return
            yield frame

    def read(self) -> Frame | None:
        """The next frame, or None at end of stream."""
        while True:
            line = self.stream.readline(self.max_bytes + 1)
            if not line:
                return None
            if len(line) > self.max_bytes and not line.endswith(b"\n"):
                raise FrameError(f"frame exceeds the limit of {self.max_bytes} bytes")
            frame = decode_line(line, self.max_bytes)
            if frame is not None:
                return frame
            self._keep_noise(line)

    def _keep_noise(self, line: bytes) -> None:
        if self._noise_size >= self.noise_limit:
            return
        text = line.decode("utf-8", "replace").rstrip("\n")
        self.noise.append(text)
        self._noise_size += len(text)
