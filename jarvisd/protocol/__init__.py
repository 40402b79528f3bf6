"""Wire protocols. ``frames``: the sentinel-delimited frame protocol shared by the sandbox
runner, the RLM REPL process and external-agent bridges (standard library only);
:class:`InferRequest`: what an ``infer`` frame asks of the host's engine;
:class:`OfferedTool`: a host tool a ``tool`` frame may call; :class:`Message`: the typed
JSON message base both the frames and the daemon socket build on."""

from ._frames import (
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    SENTINEL,
    Approval,
    Approve,
    Cancel,
    Checkpoint,
    ErrorFrame,
    EventFrame,
    Frame,
    FrameError,
    FrameReader,
    Infer,
    InferResult,
    Log,
    Ping,
    Pong,
    ResultFrame,
    Start,
    ToolFrame,
    ToolResultFrame,
    decode_line,
    encode,
    jsonable,
)
from ._infer import InferRequest
from ._link import ChildLink
from ._message import MISSING, Invalid, Message, wire
from ._tools import OfferedTool

__all__ = [
    "MAX_FRAME_BYTES",
    "MISSING",
    "PROTOCOL_VERSION",
    "SENTINEL",
    "Approval",
    "Approve",
    "Cancel",
    "Checkpoint",
    "ChildLink",
    "ErrorFrame",
    "EventFrame",
    "Frame",
    "FrameError",
    "FrameReader",
    "Infer",
    "InferRequest",
    "InferResult",
    "Invalid",
    "Log",
    "Message",
    "OfferedTool",
    "Ping",
    "Pong",
    "ResultFrame",
    "Start",
    "ToolFrame",
    "ToolResultFrame",
    "decode_line",
    "encode",
    "jsonable",
    "wire",
]
