"""Sub-agent tools: any agent or pattern offered to a tool-using agent as a tool.

The caller stays in charge (unlike a handoff): the member's answer comes back as the
tool's result. ``share_history`` gives the member the caller's conversation (the
context the caller was given); ``share_state`` gives it the caller's state dict
(``context.metadata["state"]``) itself, so what the member writes there the caller
sees; without it the member gets a copy.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from .._messages import ToolResult, ToolSpec
from .._runcontext import RunContext
from ..agents import AgentContext
from ..tools import BaseTool, current_run
from ._base import Member, MemberLike, as_member, call_member, current_context

__all__ = ["AgentTool", "tool_name"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def tool_name(name: str) -> str:
    """A tool name models accept (letters, digits, ``_`` and ``-``; 64 at most)."""
    return (_UNSAFE.sub("_", name).strip("_") or "member")[:64]


class AgentTool(BaseTool):
    tool_id: ClassVar[str] = "agent"
    #: A sub-agent is bounded by the run's budget and cancel token, not by the
    #: executor's per-tool default (30 s would cut any real agent short).
    timeout: float | None = 3600.0

    def __init__(
        self,
        member: MemberLike,
        *,
        name: str | None = None,
        description: str = "",
        share_history: bool = False,
        share_state: bool = False,
        caller: str = "agent",
    ) -> None:
        self.member: Member = as_member(member)
        self.name = tool_name(name or self.member.name)
        self.description = (
            description or f"Ask {self.member.name} to do a task; returns its answer."
        )
        self.share_history = share_history
        self.share_state = share_state
        self.caller = caller

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            self.name,
            self.description,
            {
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "What to do, in full sentences."}
                },
                "required": ["task"],
            },
        )

    def context_for(self, caller: AgentContext | None) -> AgentContext:
        conversation = list(caller.conversation) if caller and self.share_history else []
        state: dict[str, object] = {}
        if caller is not None:
            shared = caller.metadata.setdefault("state", {})
            if isinstance(shared, dict):  # the state members share: a plain dict
                state = shared if self.share_state else dict(shared)
        return AgentContext(conversation=conversation, metadata={"state": state})

    async def execute(self, **params: Any) -> ToolResult:
        task = str(params["task"])  # the executor checked it against the schema
        run = current_run() or RunContext()
        result = await call_member(
            self.caller, self.member, task, self.context_for(current_context()), run
        )
        content = result.content if result.success else f"Error: {result.error}"
        return ToolResult(
            self.name,
            content,
            result.success,
            metadata={"provenance": result.provenance.to_dict(), "usage": result.usage.to_dict()},
        )
