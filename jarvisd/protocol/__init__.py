"""Wire protocols. ``frames``: the sentinel-delimited frame protocol shared by the sandbox
runner, the RLM REPL process and external-agent bridges (standard library only);
:class:`InferRequest`: what an ``infer`` frame asks of the host's engine;
:class:`OfferedTool`: a host tool a ``tool`` frame may call; :class:`Message`: the typed
JSON message base both the frames and the daemon socket build on.

Names load on first use: the daemon client builds its messages on :class:`Message`
alone, and must not pay for the frames (nor the asyncio of :class:`ChildLink`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr

if TYPE_CHECKING:
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

_LAZY = {
    "MAX_FRAME_BYTES": "._frames",
    "MISSING": "._message",
    "PROTOCOL_VERSION": "._frames",
    "SENTINEL": "._frames",
    "Approval": "._frames",
    "Approve": "._frames",
    "Cancel": "._frames",
    "Checkpoint": "._frames",
    "ChildLink": "._link",
    "ErrorFrame": "._frames",
    "EventFrame": "._frames",
    "Frame": "._frames",
    "FrameError": "._frames",
    "FrameReader": "._frames",
    "Infer": "._frames",
    "InferRequest": "._infer",
    "InferResult": "._frames",
    "Invalid": "._message",
    "Log": "._frames",
    "Message": "._message",
    "OfferedTool": "._tools",
    "Ping": "._frames",
    "Pong": "._frames",
    "ResultFrame": "._frames",
    "Start": "._frames",
    "ToolFrame": "._frames",
    "ToolResultFrame": "._frames",
    "decode_line": "._frames",
    "encode": "._frames",
    "jsonable": "._frames",
    "wire": "._message",
}

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


__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
