"""The configured MCP servers as ACP ``session/new`` entries (``McpServerStdio``), so an
external agent (opencode over ACP) starts the same servers inside its own sandbox."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import UsageError

if TYPE_CHECKING:
    from .._config import Config

__all__ = ["McpStdio", "acp_mcp_servers"]


@dataclass(frozen=True, slots=True)
class McpStdio:
    """One stdio server as ACP describes it: ``command`` is an absolute path."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def to_acp(self) -> Any:
        """The ``acp.schema.McpServerStdio`` for ``conn.new_session(mcp_servers=[...])``
        (needs the ``agent-client-protocol`` package)."""
        from acp.schema import EnvVariable, McpServerStdio  # type: ignore[import-not-found,unused-ignore]

        env = [EnvVariable(name=k, value=v) for k, v in self.env.items()]
        return McpServerStdio(name=self.name, command=self.command, args=list(self.args), env=env)


def acp_mcp_servers(config: Config, names: Iterable[str] | None = None) -> list[McpStdio]:
    """The servers ``names`` (None: every configured one), commands resolved on PATH
    (ACP wants absolute paths); UsageError for an unknown server or a missing program."""
    servers = config.mcp.servers
    chosen = list(servers) if names is None else list(dict.fromkeys(names))
    entries: list[McpStdio] = []
    for name in chosen:
        if name not in servers:
            raise UsageError(
                f"no MCP server {name!r} in the config (known: {', '.join(servers) or 'none'})"
            )
        program, *args = servers[name].command
        found = program if os.path.isabs(program) else shutil.which(program)
        if found is None:
            raise UsageError(f"MCP server {name!r}: program {program!r} is not on PATH")
        entries.append(McpStdio(name, found, tuple(args), dict(servers[name].env)))
    return entries
