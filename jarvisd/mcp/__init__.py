"""MCP tool servers: ``[mcp.servers.NAME]`` in the config, their tools as jarvis tools
named ``NAME.tool``, started once per run and stopped at its end; and the same
declarations as ACP ``McpServerStdio`` entries for external agents.

Needs the ``mcp`` package only when a server is started.
"""

from ._acp import acp_mcp_servers
from ._client import McpError, McpServer, McpToolInfo
from ._toolset import McpTool, McpToolset, mcp_server_of

__all__ = [
    "McpError",
    "McpServer",
    "McpTool",
    "McpToolInfo",
    "McpToolset",
    "acp_mcp_servers",
    "mcp_server_of",
]
