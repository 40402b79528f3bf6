"""What an agent's ``session/update`` notifications mean to jarvis, as typed values.

:func:`map_update` is pure: an ACP update in, zero or more :data:`Mapped` values out
(text for the run's streamed answer, a tool call starting or ending, a plan). The
session publishes them on the run's bus. Everything here comes from the agent, so it is
clipped to bounded sizes; an update jarvis does not use maps to nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_EVENT_CHARS",
    "Mapped",
    "PlanChanged",
    "TextDelta",
    "ToolEnded",
    "ToolStarted",
    "clip",
    "map_update",
]

#: The most of any one piece of agent-sent text an event carries.
MAX_EVENT_CHARS = 4000
#: Plan entries kept from one plan update.
MAX_PLAN_ENTRIES = 100


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolStarted:
    call_id: str
    title: str
    kind: str
    arguments: Any


@dataclass(frozen=True, slots=True)
class ToolEnded:
    call_id: str
    title: str
    success: bool
    content: str


@dataclass(frozen=True, slots=True)
class PlanChanged:
    entries: tuple[tuple[str, str], ...]  # (status, content)


Mapped = TextDelta | ToolStarted | ToolEnded | PlanChanged


def clip(text: str, limit: int = MAX_EVENT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f" [... {len(text) - limit} more characters]"


def _bounded(value: Any, depth: int = 0) -> Any:
    """A JSON-able copy of ``value`` small enough for an event (long strings clipped,
    deep or wide structures cut)."""
    if isinstance(value, str):
        return clip(value, 1000)
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth >= 4:
        return "..."
    if isinstance(value, dict):
        return {str(k)[:100]: _bounded(v, depth + 1) for k, v in list(value.items())[:50]}
    if isinstance(value, list | tuple):
        return [_bounded(v, depth + 1) for v in list(value)[:50]]
    return clip(str(value), 1000)


def _content_text(content: Any) -> str:
    """The text of a tool call's content list (text blocks, diffs, terminals)."""
    parts: list[str] = []
    for item in content or ():
        inner = getattr(item, "content", None)
        text = getattr(inner, "text", None)
        if isinstance(text, str):
            parts.append(text)
        elif getattr(item, "type", "") == "diff":
            parts.append(f"edited {getattr(item, 'path', '')}")
        elif getattr(item, "type", "") == "terminal":
            parts.append(f"terminal {getattr(item, 'terminal_id', '')}")
        if sum(map(len, parts)) > MAX_EVENT_CHARS:
            break
    return clip("\n".join(parts))


class ToolTitles:
    """The title of each tool call seen (its end updates may omit it), bounded."""

    MAX = 1000

    def __init__(self) -> None:
        self._titles: dict[str, str] = {}

    def remember(self, call_id: str, title: str) -> None:
        if call_id in self._titles:
            return
        if len(self._titles) >= self.MAX:
            self._titles.pop(next(iter(self._titles)))
        self._titles[call_id] = title

    def get(self, call_id: str) -> str:
        return self._titles.get(call_id, "")


def map_update(update: Any, titles: ToolTitles | None = None) -> list[Mapped]:
    """The jarvis meaning of one ``session/update`` payload (an ``acp.schema`` model)."""
    kind = getattr(update, "session_update", None)
    titles = titles if titles is not None else ToolTitles()
    if kind == "agent_message_chunk":
        text = getattr(getattr(update, "content", None), "text", None)
        return [TextDelta(text)] if isinstance(text, str) and text else []
    if kind in ("tool_call", "tool_call_update"):
        call_id = str(getattr(update, "tool_call_id", ""))[:200]
        # The title a call started with names it (later updates retitle it as they go).
        title = titles.get(call_id) or clip(str(getattr(update, "title", None) or ""), 200)
        if title:
            titles.remember(call_id, title)
        title = title or "tool"
        status = getattr(update, "status", None)
        out: list[Mapped] = []
        if kind == "tool_call":
            tool_kind = str(getattr(update, "kind", None) or "other")
            out.append(ToolStarted(call_id, title, tool_kind, _bounded(update.raw_input)))
        if status in ("completed", "failed"):
            text = _content_text(getattr(update, "content", None))
            if not text and getattr(update, "raw_output", None) is not None:
                text = clip(str(_bounded(update.raw_output)))
            out.append(ToolEnded(call_id, title, status == "completed", text))
        return out
    if kind == "plan":
        entries = tuple(
            (str(e.status), clip(str(e.content), 500))
            for e in list(getattr(update, "entries", None) or ())[:MAX_PLAN_ENTRIES]
        )
        return [PlanChanged(entries)]
    return []
