"""What a jarvis run's events mean to an ACP client, as ``session/update`` payloads.

:class:`UpdateMapper` turns the run's bus events into ACP updates: a tool call's start
and end become ``tool_call`` and ``tool_call_update`` (with its kind, status and
output), a pattern's members show as tool calls too, and plan steps (plan-and-execute,
tool plans, external agents' plans) become ``plan`` updates. The reverse of
``jarvisd.external._mapping``, and bounded the same way: what a tool or model produced
is clipped before it goes on the wire or into the session's record.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..external._mapping import _bounded, clip

if TYPE_CHECKING:
    from acp import schema

    from .._events import Event

__all__ = ["TOOL_KINDS", "UpdateMapper", "tool_kind"]

#: The ACP kind of jarvis's built-in tools (anything else: "other"). The kind decides
#: whether a call asks the client first (see ``jarvisd.acp._agent``): "think" never does.
TOOL_KINDS: Mapping[str, str] = {
    "calculator": "think",
    "think": "think",
    "llm": "think",
    "file_read": "read",
    "retrieval": "search",
    "web_search": "search",
    "http_request": "fetch",
    "code_interpreter": "execute",
    "shell": "execute",
}
#: Steps kept in one plan.
MAX_PLAN_ENTRIES = 100
_PLAN_STATUS = {"start": "in_progress", "done": "completed", "retry": "in_progress"}


def tool_kind(tool: str) -> str:
    return TOOL_KINDS.get(tool, "other")


class UpdateMapper:
    """The ACP updates of one prompt's run, from its events, in order."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._numbers = itertools.count(1)
        self._open: dict[tuple[str, str], list[str]] = {}  # (tool, call id) -> ACP ids
        self._plan: dict[str, tuple[str, str]] = {}  # step -> (status, text)

    def _new_id(self) -> str:
        return f"{self._prefix}-{next(self._numbers)}"

    def started_id(self, tool: str, call_id: str) -> str:
        """The ACP id of the newest open call of ``tool`` with ``call_id``."""
        ids = self._open.get((tool, call_id))
        return ids[-1] if ids else ""

    def map(self, event: Event) -> list[Any]:
        from acp import schema

        kind = event.type.value
        data = event.data
        if kind == "tool_call_start":
            tool = str(data.get("tool", ""))[:200]
            acp_id = self._new_id()
            self._open.setdefault((tool, str(data.get("call_id") or "")), []).append(acp_id)
            return [
                schema.ToolCallStart(
                    session_update="tool_call",
                    tool_call_id=acp_id,
                    title=tool,
                    kind=tool_kind(tool),  # type: ignore[arg-type]
                    status="in_progress",
                    raw_input=_bounded(data.get("arguments")),
                )
            ]
        if kind == "tool_call_end":
            tool = str(data.get("tool", ""))[:200]
            ids = self._open.get((tool, str(data.get("call_id") or "")))
            if not ids:
                return []
            acp_id = ids.pop()
            text = clip(str(data.get("content", "")))
            return [
                schema.ToolCallProgress(
                    session_update="tool_call_update",
                    tool_call_id=acp_id,
                    status="completed" if data.get("success") else "failed",
                    content=[_text_content(text)] if text else None,
                    raw_output={"content": text, "success": bool(data.get("success"))},
                )
            ]
        if kind == "member_start":
            member = str(data.get("member", ""))[:200]
            acp_id = self._new_id()
            self._open.setdefault(("member", member), []).append(acp_id)
            return [
                schema.ToolCallStart(
                    session_update="tool_call",
                    tool_call_id=acp_id,
                    title=f"{data.get('pattern', 'team')}: {member}"[:300],
                    kind="think",
                    status="in_progress",
                    raw_input={"member": member},
                )
            ]
        if kind == "member_end":
            member = str(data.get("member", ""))[:200]
            ids = self._open.get(("member", member))
            if not ids:
                return []
            ok = bool(data.get("success", True)) and not data.get("error")
            text = clip(str(data.get("content") or data.get("error") or ""))
            return [
                schema.ToolCallProgress(
                    session_update="tool_call_update",
                    tool_call_id=ids.pop(),
                    status="completed" if ok else "failed",
                    content=[_text_content(text)] if text else None,
                )
            ]
        if kind == "step":
            return self._step(data)
        if kind == "agent_plan":
            entries = list(data.get("entries") or ())[:MAX_PLAN_ENTRIES]
            self._plan = {
                str(i): (str(e[0]), clip(str(e[1]), 500))
                for i, e in enumerate(entries)
                if isinstance(e, list | tuple) and len(e) == 2
            }
            return [self._plan_update()]
        return []

    def _step(self, data: Mapping[str, Any]) -> list[Any]:
        step = str(data.get("step", ""))[:200]
        status = str(data.get("status", ""))
        detail = str(data.get("detail") or "")
        if step not in self._plan and len(self._plan) >= MAX_PLAN_ENTRIES:
            return []
        text = step if not detail or status != "start" else f"{step}: {detail}"
        previous = self._plan.get(step)
        if previous is not None and status != "start":
            text = previous[1]
        self._plan[step] = (_PLAN_STATUS.get(status, "completed"), clip(text, 500))
        return [self._plan_update()]

    def _plan_update(self) -> schema.AgentPlanUpdate:
        from acp import schema

        return schema.AgentPlanUpdate(
            session_update="plan",
            entries=[
                schema.PlanEntry(
                    content=text,
                    priority="medium",
                    status=status
                    if status in ("pending", "in_progress", "completed")
                    else "completed",  # type: ignore[arg-type]
                )
                for status, text in self._plan.values()
            ],
        )


def _text_content(text: str) -> schema.ContentToolCallContent:
    from acp import schema

    return schema.ContentToolCallContent(
        type="content", content=schema.TextContentBlock(type="text", text=text)
    )
