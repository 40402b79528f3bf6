"""The host's side of ``tool`` frames: tools the host runs for a program across a
process boundary (a sandboxed run's MCP tools, whose servers the host started in the
sandbox), offered to it by name in its start payload.

The program is hostile, so a ``tool`` frame is only a request. A tool the host did not
offer, or arguments its schema refuses, get an error result and nothing runs. Every
call that runs is counted on the run's ledger first (and on the program's own, when it
has one): a program that ignores its own cap is stopped here, with the run. Each call
runs under the tool's timeout, and the text that goes back is cut to
``max_result_bytes``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence

from .._messages import ToolResult, Usage
from .._runcontext import Budget, BudgetExceeded, Hold, RunContext, RunStopped
from ..protocol import OfferedTool, ToolFrame, ToolResultFrame
from ..tools import ArgumentError, BaseTool, validate_arguments

__all__ = ["ANSWER_MARGIN_S", "MAX_RESULT_BYTES", "HostTools"]

#: The most of one result's text (UTF-8) that goes back to the program.
MAX_RESULT_BYTES = 64 * 1024
#: A tool's timeout when it sets none (the tool dispatcher's default).
DEFAULT_TIMEOUT_S = 30.0
#: How much longer the program waits for an answer than the host lets the tool run.
ANSWER_MARGIN_S = 10.0


class HostTools:
    """``tools`` (by their spec's name) for a program in ``run``; ``budget`` is the
    program's own ledger (None: only the run's counts)."""

    def __init__(
        self,
        tools: Sequence[BaseTool],
        run: RunContext,
        *,
        budget: Budget | None = None,
        max_result_bytes: int = MAX_RESULT_BYTES,
    ) -> None:
        self.tools = {tool.spec.name: tool for tool in tools}
        self.run = run
        self.budget = budget
        self.max_result_bytes = max_result_bytes

    def offered(self) -> list[OfferedTool]:
        """The tools as the start payload offers them."""
        return [OfferedTool(t.spec, _timeout(t) + ANSWER_MARGIN_S) for t in self.tools.values()]

    async def call(self, frame: ToolFrame) -> ToolResultFrame:
        """The result of the call ``frame`` asks for, or the error result that refuses
        it. Raises RunStopped when the run is stopped or a ledger has no call left."""
        tool = self.tools.get(frame.tool)
        if tool is None:
            offered = ", ".join(self.tools) or "none"
            return self._reply(
                frame,
                f"Error: no tool {frame.tool[:100]!r} was offered to this run (offered: {offered})",
                success=False,
            )
        name = tool.spec.name
        try:
            params = validate_arguments(dict(frame.arguments), tool.spec.parameters)
        except ArgumentError as exc:
            return self._reply(frame, f"Error: invalid arguments for {name}: {exc}", success=False)
        holds = self._reserve()
        try:
            content, success = await self._run(tool, params)
        finally:
            for hold in holds:  # it started, so it counts, however it ended
                hold.settle(Usage())
        return self._reply(frame, content, success=success)

    def _reserve(self) -> list[Hold]:
        run = self.run
        run.cancel.raise_if_cancelled()  # a call the run has stopped never starts
        try:
            holds = [run.budget.reserve_tool_call()]
        except BudgetExceeded as exc:
            run.cancel.cancel(str(exc), stop=BudgetExceeded)  # every branch of the run stops
            raise
        if self.budget is not None:
            try:
                holds.append(self.budget.reserve_tool_call())
            except BudgetExceeded:
                holds[0].release()
                raise
        return holds

    async def _run(self, tool: BaseTool, params: dict[str, object]) -> tuple[str, bool]:
        name, timeout = tool.spec.name, _timeout(tool)
        try:
            async with asyncio.timeout(timeout):
                if inspect.iscoroutinefunction(tool.execute):
                    value = await tool.execute(**params)
                else:  # a sync tool may block: not on the loop that serves the program
                    value = await asyncio.to_thread(tool.execute, **params)
                if inspect.isawaitable(value):
                    value = await value
        except TimeoutError:
            return f"Error: {name} timed out after {timeout:g} s.", False
        except RunStopped:
            raise
        except Exception as exc:
            return f"Error: {name} failed: {exc}", False
        if isinstance(value, ToolResult):
            return value.content, value.success
        return str(value), True

    def _reply(self, frame: ToolFrame, content: str, *, success: bool) -> ToolResultFrame:
        return ToolResultFrame(
            id=frame.id, content=_clip(content, self.max_result_bytes), success=success
        )


def _timeout(tool: BaseTool) -> float:
    return tool.timeout or DEFAULT_TIMEOUT_S


def _clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` bytes of UTF-8 (cut on a character boundary), and a
    note of how much was cut."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return (
        data[:limit].decode("utf-8", "ignore")
        + f"\n[... truncated: {len(data) - limit} more bytes]"
    )
