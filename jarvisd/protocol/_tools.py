"""The tools a host offers a program across a process boundary, as the program's start
payload carries them (a list under ``host_tools``): the sandbox runner's MCP tools,
whose servers run on the host's side, in the sandbox. The program calls one with a
``tool`` frame and waits at most ``timeout`` seconds for the ``tool_result``. The wire
form of one::

    {"name": "demo.add", "description": "...", "parameters": {JSON schema}, "timeout": 45.0}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._messages import ToolSpec
from ._frames import FrameError

__all__ = ["OfferedTool"]


@dataclass(frozen=True, slots=True)
class OfferedTool:
    """One host tool: what the model is shown, and how long the program waits for the
    host's answer to one call (longer than the host lets the tool run, so the host's
    own timeout, with its clearer message, comes first)."""

    spec: ToolSpec
    timeout: float

    def to_dict(self) -> dict[str, Any]:
        return {**self.spec.to_dict(), "timeout": self.timeout}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OfferedTool:
        """Parse the wire form; :class:`FrameError` says what is wrong with it."""
        try:
            spec = ToolSpec.from_dict(data)
            timeout = float(data["timeout"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FrameError(f"malformed host tool: {exc}") from exc
        if not spec.name or not math.isfinite(timeout) or timeout <= 0:
            raise FrameError(f"malformed host tool {spec.name!r}: a name and a timeout > 0")
        return cls(spec, timeout)
