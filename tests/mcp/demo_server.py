"""A real stdio MCP server, written with the ``mcp`` package, for the tests: two tools.

``add`` answers at once; ``pause`` sleeps, so a test can kill the server mid-call."""

from __future__ import annotations

import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("demo")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers and return their sum."""
    return a + b


@server.tool()
def pause(seconds: float) -> str:
    """Wait for the given number of seconds, then say so."""
    time.sleep(seconds)
    return f"waited {seconds:g} s"


if __name__ == "__main__":
    server.run()
