"""Harness: hooks around a member's run and its tool calls, and a JSON run report.

``before_run(input)`` may rewrite the input; ``after_run(result)`` sees the result;
``before_tool(data)`` and ``after_tool(data)`` see the tool-call events of this member's
subtree only (the harness gives the subtree its own bus, relayed to the run's). A hook
that raises is logged and ignored, like any bus subscriber: hooks observe, they do not
decide. Self-correction is :class:`SelfCorrecting` inside the harness (``check``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .._events import Event, EventBus, EventType
from .._runcontext import RunContext
from ..agents import AgentContext
from ._base import Member, MemberLike, Pattern, Result, as_member
from ._selfcorrect import SelfCorrecting

__all__ = ["Harness"]

log = logging.getLogger(__name__)

ToolHook = Callable[[Mapping[str, Any]], None]


class Harness(Pattern):
    kind = "harness"

    def __init__(
        self,
        member: MemberLike,
        *,
        before_run: Callable[[str], str | None] | None = None,
        after_run: Callable[[Result], None] | None = None,
        before_tool: ToolHook | None = None,
        after_tool: ToolHook | None = None,
        check: Callable[[Result], str | None] | None = None,
        max_retries: int = 2,
        name: str | None = None,
    ) -> None:
        inner: Member = as_member(member)
        super().__init__(name or inner.name)
        if check is not None:
            inner = SelfCorrecting(inner, check, max_retries=max_retries)
        self.member = inner
        self.before_run = before_run
        self.after_run = after_run
        self.before_tool = before_tool
        self.after_tool = after_tool
        #: The report of the last run (JSON-able), also in ``result.metadata["report"]``.
        self.report: dict[str, object] = {}

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        started = time.time()
        tools: list[dict[str, Any]] = []
        if self.before_run is not None:
            changed = _quietly(self.before_run, input)
            if isinstance(changed, str):
                input = changed

        def on_event(event: Event) -> None:
            run.bus.deliver(event)  # the run's subscribers see everything, as before
            if event.type is EventType.TOOL_CALL_START and self.before_tool is not None:
                self.before_tool(event.data)
            elif event.type is EventType.TOOL_CALL_END:
                tools.append({k: event.data.get(k) for k in ("tool", "success", "latency_s")})
                if self.after_tool is not None:
                    self.after_tool(event.data)

        relay = EventBus()
        relay.subscribe(on_event)
        # Same ledger and token; its own bus (and engines bound to that bus).
        inner = dataclasses.replace(run, bus=relay, bound_engines={})
        result = await self.member.arun(input, context, run=inner)
        self.report = {
            "member": self.member.name,
            "input": input,
            "output": result.content,
            "success": result.success,
            "error": result.error,
            "provenance": result.provenance.to_dict(),
            "usage": result.usage.to_dict(),
            "attempts": result.metadata.get("attempts", 1),
            "tool_calls": tools,
            "started": started,
            "duration_s": round(time.time() - started, 6),
        }
        result.metadata["report"] = self.report
        if self.after_run is not None:
            _quietly(self.after_run, result)
        return result


_T = TypeVar("_T")


def _quietly(hook: Callable[[_T], object], value: _T) -> object:
    try:
        return hook(value)
    except Exception:
        log.exception("harness hook %r failed", hook)
        return None
