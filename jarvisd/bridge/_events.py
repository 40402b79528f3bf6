"""Events a program across a process boundary may publish on the host's bus, vetted.

Everything a sandboxed program sends is hostile. Its ``event`` frames may only report
what happens inside it: agent turns and tool calls. Host-owned types (inference
events, which carry the token counts the budget and traces trust, and run events) are
refused: the host publishes those itself. Of the data, only the fields listed per type
are kept, each checked for its type and cut to a bounded size; the host's own keys
(``depth``, the session's tags) are set by the host and win. Nothing the program names
becomes a keyword argument.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._events import EventType
from ..protocol import EventFrame

__all__ = ["MAX_EVENT_TEXT", "PROGRAM_EVENTS", "ProgramEvent", "vet_event"]

#: The longest text field a program event keeps (characters); longer ones are cut.
MAX_EVENT_TEXT = 16 * 1024
#: How far below the session's depth a program may place its own nested agents.
_MAX_NESTING = 16


def _text(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    if len(value) > MAX_EVENT_TEXT:
        return value[:MAX_EVENT_TEXT] + f"[... cut: {len(value) - MAX_EVENT_TEXT} characters]"
    return value


def _flag(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return min(max(value, 0), 1 << 31)


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def _arguments(value: object) -> dict[str, Any] | None:
    if not isinstance(value, Mapping):
        return None
    try:
        text = json.dumps(value, default=str)
    except RecursionError:  # nested deeper than the host's stack allows
        return {"truncated": True}
    if len(text) > MAX_EVENT_TEXT:
        return {"truncated": True, "bytes": len(text)}
    loaded: dict[str, Any] = json.loads(text)
    return loaded


_Check = Callable[[object], object]
_TURN = {"agent": _text}
#: The types a program may publish, and the fields each keeps.
PROGRAM_EVENTS: dict[EventType, dict[str, _Check]] = {
    EventType.AGENT_TURN_START: {**_TURN, "input": _text, "resumed": _flag},
    EventType.AGENT_TURN_END: {
        **_TURN,
        "turns": _count,
        "content": _text,
        "error": _text,
        "max_turns_exceeded": _flag,
    },
    EventType.TOOL_CALL_START: {"tool": _text, "call_id": _text, "arguments": _arguments},
    EventType.TOOL_CALL_END: {
        "tool": _text,
        "call_id": _text,
        "success": _flag,
        "latency_s": _seconds,
        "content": _text,
        "status": _text,
    },
}


@dataclass(frozen=True, slots=True)
class ProgramEvent:
    type: EventType
    data: dict[str, object]


def vet_event(frame: EventFrame, depth: int, tags: Mapping[str, object]) -> ProgramEvent | None:
    """The event to publish for ``frame``, or None when its type is not the program's to
    publish. ``depth`` is the session's run depth: the program's agents sit at it or
    (nested) below it."""
    try:
        event_type = EventType(frame.type)
    except ValueError:
        return None
    fields = PROGRAM_EVENTS.get(event_type)
    if fields is None:
        return None
    data: dict[str, object] = {}
    for key, check in fields.items():
        value = check(frame.data.get(key))
        if value is not None:
            data[key] = value
    nested = _count(frame.data.get("depth"))
    data["depth"] = depth + min(max((nested or depth) - depth, 0), _MAX_NESTING)
    data.update(tags)
    return ProgramEvent(event_type, data)
