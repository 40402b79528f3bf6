"""Starting an external agent as a host process (``--no-sandbox``): NOT isolated.

The agent runs as the same user, with the host's network and files. It gets what it
would get in the sandbox otherwise: its own session under a subreaper (everything it
starts, detached or not, is killed at the end: ``executors._reaper``),
its own HOME (removed at the end), the workspace as its working directory, and an
environment built from nothing (no inherited secrets).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import AgentNotInstalled
from ..executors import Channel
from ..executors._subprocess import SubprocessChannel, spawn_reaped
from ._registry import GatewayAccess
from ._transport import MAX_LINE_BYTES

if TYPE_CHECKING:
    from .._runcontext import RunContext
    from ..engines import Engine
    from ..tools import ToolDispatcher

__all__ = ["host_gateway", "start_on_host"]

#: The channel's own timeout: the run's budgets (wall clock, cancel) end a run; this
#: only bounds an agent nobody stops.
HOST_TIMEOUT_S = 24 * 3600.0


async def start_on_host(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: Path,
    home: Path,
    keep_home: bool = False,
) -> Channel:
    """Start ``argv`` in its own session; ``home`` is removed when the channel ends
    (``keep_home``: only its ``tmp``, for a HOME a resumed run needs again)."""
    try:
        process = await spawn_reaped(argv, cwd=cwd, env=env, limit=MAX_LINE_BYTES + 2)
    except OSError as exc:
        raise AgentNotInstalled(f"cannot start {argv[0]}: {exc.strerror or exc}") from exc
    scratch = home / "tmp" if keep_home else home
    return SubprocessChannel(process, scratch, HOST_TIMEOUT_S, reaper=True)


@contextlib.asynccontextmanager
async def host_gateway(
    engine: Engine,
    run: RunContext,
    model: str,
    *,
    max_tokens: int,
    tools: ToolDispatcher | None = None,
    temperature: float | None = None,
    max_turns: int | None = None,
) -> AsyncIterator[GatewayAccess]:
    """The run's inference gateway for a host process: on loopback TCP (the process
    shares the host's network anyway), a per-run token; gone with the block.
    ``tools``: the run's tools, served at its ``/mcp``."""
    from ..gateway import Gateway

    async with Gateway(
        engine,
        run,
        model,
        max_tokens=max_tokens,
        tools=tools,
        temperature=temperature,
        max_turns=max_turns,
    ) as gateway:
        assert gateway.url is not None  # TCP: it has one
        yield GatewayAccess(gateway.url.rstrip("/"), gateway.token, gateway.model_name)
