"""Think: a scratchpad. The model writes a thought; it comes back unchanged, which
gives small models a legal "tool call" for reasoning instead of a malformed answer."""

from __future__ import annotations

from typing import Any, ClassVar

from .._messages import ToolSpec
from ._base import BaseTool

__all__ = ["ThinkTool"]


class ThinkTool(BaseTool):
    tool_id: ClassVar[str] = "think"
    blocking: ClassVar[bool] = False  # bounded and pure: runs inline
    _spec = ToolSpec(
        name="think",
        description="Write down reasoning step by step. Returns your thought unchanged.",
        parameters={
            "type": "object",
            "properties": {"thought": {"type": "string", "description": "Your reasoning."}},
            "required": ["thought"],
        },
    )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def execute(self, **params: Any) -> str:
        return str(params["thought"])
