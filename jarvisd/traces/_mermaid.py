"""A recorded run drawn as a mermaid sequence diagram: what really happened, from the
trace's events (delegations, tool calls, handoffs, routes, rounds, steps), not what a
pattern was meant to do.

A tool call is drawn from the member that was running when it started (the innermost
member started and not yet ended); with parallel members that is a best guess, and
the diagram says nothing it did not see. Event data came from agents and models: it
is clipped and stripped of what mermaid would read as syntax.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["to_mermaid"]

_UNSAFE = re.compile(r"[;#<>{}\[\]\"`%|\\]+")
MAX_LABEL = 60


def _label(text: object) -> str:
    flat = " ".join(str(text).split())
    flat = _UNSAFE.sub(" ", flat).strip()
    return flat if len(flat) <= MAX_LABEL else flat[: MAX_LABEL - 3] + "..."


class _Diagram:
    def __init__(self) -> None:
        self.ids: dict[str, str] = {}
        self.lines: list[str] = []

    def who(self, name: str) -> str:
        if name not in self.ids:
            self.ids[name] = f"p{len(self.ids)}"
        return self.ids[name]

    def say(self, src: str, dst: str, arrow: str, text: object) -> None:
        self.lines.append(f"    {self.who(src)}{arrow}{self.who(dst)}: {_label(text) or '-'}")

    def note(self, over: str, text: object) -> None:
        self.lines.append(f"    Note over {self.who(over)}: {_label(text) or '-'}")

    def render(self) -> str:
        head = ["sequenceDiagram"]
        head += [f"    participant {pid} as {_label(name)}" for name, pid in self.ids.items()]
        return "\n".join(head + self.lines) + "\n"


def to_mermaid(events: Iterable[Mapping[str, Any]], top: str = "agent") -> str:
    """The diagram of a trace's ``events`` (as stored: ``type``, ``data``)."""
    d = _Diagram()
    d.who("user")
    open_members: list[str] = []
    top_name = top
    for event in events:
        kind = str(event.get("type", ""))
        data: Mapping[str, Any] = event.get("data") or {}
        depth = data.get("depth")
        if kind == "agent_turn_start" and depth == 0:
            top_name = str(data.get("team") or data.get("agent") or top)
            d.say("user", top_name, "->>", data.get("input", ""))
            open_members = [top_name]
        elif kind == "agent_turn_end" and depth == 0:
            error = data.get("error")
            d.say(top_name, "user", "-->>", f"error: {error}" if error else data.get("content"))
        elif kind == "member_start":
            parent = _resolve(str(data.get("pattern", "")), open_members, top_name)
            member = str(data.get("member", ""))
            d.say(parent, member, "->>", data.get("input", ""))
            open_members.append(member)
        elif kind == "member_end":
            parent = _resolve(str(data.get("pattern", "")), open_members, top_name)
            member = str(data.get("member", ""))
            text = data.get("content") if data.get("success") else f"FAILED {data.get('error')}"
            d.say(member, parent, "-->>", text)
            if member in open_members:
                open_members.reverse()
                open_members.remove(member)  # the latest one of that name
                open_members.reverse()
        elif kind == "tool_call_start":
            d.say(
                open_members[-1] if open_members else top_name,
                f"tool {data.get('tool')}",
                "->>",
                _arguments(data.get("arguments")),
            )
        elif kind == "tool_call_end":
            caller = open_members[-1] if open_members else top_name
            status = "ok" if data.get("success") else "error"
            d.say(
                f"tool {data.get('tool')}", caller, "-->>", f"{status}: {data.get('content', '')}"
            )
        elif kind == "handoff":
            d.say(
                str(data.get("source")),
                str(data.get("target")),
                "-)",
                f"handoff: {data.get('reason') or 'transfer'}",
            )
        elif kind == "route_chosen":
            how = "fallback" if data.get("fallback") else f"route {data.get('choice')}"
            d.note(str(data.get("pattern")), f"{how}: {data.get('member') or 'none'}")
        elif kind == "round":
            d.note(str(data.get("pattern")), f"round {data.get('round')} of {data.get('of')}")
        elif kind == "step":
            d.note(
                str(data.get("pattern")),
                f"step {data.get('step')} {data.get('status')} {data.get('detail', '')}",
            )
    return d.render()


def _resolve(pattern: str, open_members: list[str], top: str) -> str:
    """The participant a pattern's event belongs to: a pattern that is itself a member
    (or the top agent) is drawn as that member."""
    return pattern if pattern else (open_members[-1] if open_members else top)


def _arguments(arguments: object) -> str:
    if isinstance(arguments, Mapping):
        return ", ".join(f"{k}={v}" for k, v in arguments.items())
    return str(arguments or "")
