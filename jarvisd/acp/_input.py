"""What an ACP client sends, checked before jarvis uses it: the client is untrusted, so
its strings are bounded and its paths must be absolute."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from acp.exceptions import RequestError

if TYPE_CHECKING:
    from .._config import McpServerConfig

__all__ = ["MAX_MCP_SERVERS", "MAX_PROMPT_CHARS", "checked_cwd", "mcp_configs", "prompt_text"]

#: The most prompt text taken from one ``session/prompt`` (characters).
MAX_PROMPT_CHARS = 1_000_000
#: The most MCP servers one session may bring.
MAX_MCP_SERVERS = 20
_NAME = re.compile(r"[^A-Za-z0-9_-]")


def checked_cwd(cwd: object) -> str:
    if not isinstance(cwd, str) or not os.path.isabs(cwd) or "\x00" in cwd or len(cwd) > 4096:
        raise RequestError.invalid_params({"message": "cwd must be an absolute path"})
    return os.path.normpath(cwd)


def prompt_text(blocks: list[Any]) -> str:
    """The text of a prompt: its text blocks, and the text of resources embedded in it
    (a file the user attached), bounded."""
    parts: list[str] = []
    size = 0
    for block in blocks or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            part = block.text
        elif kind == "resource":
            resource = block.resource
            body = getattr(resource, "text", None)
            if not isinstance(body, str):
                continue
            part = f"\n--- {str(getattr(resource, 'uri', ''))[:500]} ---\n{body}\n"
        elif kind == "resource_link":
            part = f"[{str(getattr(block, 'uri', ''))[:500]}]"
        else:
            raise RequestError.invalid_params(
                {"message": f"jarvis takes no {str(kind)[:40]} content"}
            )
        size += len(part)
        if size > MAX_PROMPT_CHARS:
            raise RequestError.invalid_params(
                {"message": f"a prompt is at most {MAX_PROMPT_CHARS} characters"}
            )
        parts.append(part)
    return "".join(parts)


def mcp_configs(servers: Any) -> dict[str, McpServerConfig]:
    """The session's MCP servers as ``[mcp.servers]`` entries (stdio only), named
    ``acp_NAME`` so they never shadow the config's."""
    from .._config import McpServerConfig

    found: dict[str, McpServerConfig] = {}
    for server in list(servers or ())[: MAX_MCP_SERVERS + 1]:
        if len(found) >= MAX_MCP_SERVERS:
            raise RequestError.invalid_params({"message": f"at most {MAX_MCP_SERVERS} MCP servers"})
        command = getattr(server, "command", None)
        if not isinstance(command, str) or not command:
            raise RequestError.invalid_params({"message": "jarvis takes stdio MCP servers only"})
        name = "acp_" + (_NAME.sub("_", str(server.name))[:40] or "server")
        while name in found:
            name += "_"
        env = {str(v.name)[:200]: str(v.value)[:10_000] for v in list(server.env or ())[:100]}
        found[name] = McpServerConfig(command=(command, *map(str, server.args[:200])), env=env)
    return found
