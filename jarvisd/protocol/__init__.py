"""Wire protocols. ``frames``: the sentinel-delimited frame protocol shared by the sandbox
runner, the RLM REPL process and external-agent bridges (standard library only);
:class:`InferRequest`: what an ``infer`` frame asks of the host's engine."""

from ._frames import (
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    SENTINEL,
    Approval,
    Approve,
    Cancel,
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
    decode_line,
    encode,
    jsonable,
)
from ._infer import InferRequest

__all__ = [
    "MAX_FRAME_BYTES",
    "PROTOCOL_VERSION",
    "SENTINEL",
    "Approval",
    "Approve",
    "Cancel",
    "ErrorFrame",
    "EventFrame",
    "Frame",
    "FrameError",
    "FrameReader",
    "Infer",
    "InferRequest",
    "InferResult",
    "Log",
    "Ping",
    "Pong",
    "ResultFrame",
    "Start",
    "decode_line",
    "encode",
    "jsonable",
]
