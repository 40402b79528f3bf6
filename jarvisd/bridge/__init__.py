"""Bridges to programs across a process boundary that speak the frame protocol: the
host side of the conversation (:class:`FrameSession`), shared by the sandboxed agent
and the external agents to come."""

from ._session import FrameSession, Outcome, run_runner, runner_result, wire_tool_results
from ._tools import HostTools

__all__ = [
    "FrameSession",
    "HostTools",
    "Outcome",
    "run_runner",
    "runner_result",
    "wire_tool_results",
]
