"""The tool seam: a spec (JSON schema) and ``execute``; everything else optional.

``execute`` may be sync or async and may return a :class:`ToolResult` or plain text.
A sync ``execute`` runs in a worker thread under the executor's timeout, unless the tool
sets ``blocking = False``: a promise that it is cheap and never blocks (the built-in
calculator and think), so it runs inline on the event loop (dispatch costs microseconds,
and no timeout applies).
Tools that need the current run (the ``llm`` tool charges the run's budget) read it
with :func:`current_run`.
"""

from __future__ import annotations

import abc
import contextvars
from collections.abc import Awaitable
from typing import Any, ClassVar

from .._messages import ToolResult, ToolSpec
from .._runcontext import RunContext

__all__ = ["BaseTool", "current_run"]

_CURRENT_RUN: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "jarvis_current_run", default=None
)


def current_run() -> RunContext | None:
    """The run the executing tool call belongs to (None outside a run)."""
    return _CURRENT_RUN.get()


class BaseTool(abc.ABC):
    tool_id: ClassVar[str] = "tool"
    #: Sync ``execute`` that may block (the safe default): the executor runs it in a
    #: worker thread under its timeout. False: cheap, runs inline, no timeout.
    blocking: ClassVar[bool] = True
    #: Seconds before the executor gives up on one call (None: the executor's default).
    timeout: float | None = None

    @property
    @abc.abstractmethod
    def spec(self) -> ToolSpec:
        """Name, description and JSON-schema parameters shown to the model."""

    @abc.abstractmethod
    def execute(self, **params: Any) -> ToolResult | str | Awaitable[ToolResult | str]:
        """Run with validated ``params``. Raise ``ToolError`` (or anything) on failure:
        the executor turns it into a failed ToolResult for the model."""

    def to_openai_function(self) -> dict[str, object]:
        return self.spec.to_openai()
