"""The sandbox runner's side of host tools: a tool the host runs for the agent in here
(an MCP server's, started by the host in a sandbox of its own), as a jarvis tool whose
every call is a ``tool`` frame to the host and whose result is the host's
``tool_result`` (``runners.sandbox_runner`` waits for it, by id).

Standard library plus jarvis's packages only: it runs in the bare python3 sandbox image.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from jarvisd._errors import ProtocolError
from jarvisd._messages import ToolResult, ToolSpec
from jarvisd.protocol import OfferedTool, ToolFrame, ToolResultFrame
from jarvisd.tools import BaseTool

if TYPE_CHECKING:
    from runners.sandbox_runner import FrameLink

__all__ = ["HostTool"]


class HostTool(BaseTool):
    """Tool ``offered`` by the host; the executor waits ``offered.timeout`` for its
    answer (longer than the host lets the tool run: the host's timeout says it first)."""

    tool_id: ClassVar[str] = "host"

    def __init__(self, link: FrameLink, offered: OfferedTool) -> None:
        self.link = link
        self._spec = offered.spec
        self.timeout = offered.timeout

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def execute(self, **params: Any) -> ToolResult:
        reply = await self.link.call(ToolFrame(tool=self._spec.name, arguments=params))
        if not isinstance(reply, ToolResultFrame):
            raise ProtocolError(f"the host answered a tool frame with {reply.kind!r}")
        return ToolResult(self._spec.name, reply.content, reply.success)
