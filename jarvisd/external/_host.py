"""Starting an external agent as a host process (``--no-sandbox``): NOT isolated.

The agent runs as the same user, with the host's network and files. It gets what it
would get in the sandbox otherwise: its own session under a subreaper (everything it
starts, detached or not, is killed at the end: ``executors._reaper``),
its own HOME (removed at the end), the workspace as its working directory, and an
environment built from nothing (no inherited secrets).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from .._errors import AgentNotInstalled
from ..executors import Channel
from ..executors._subprocess import SubprocessChannel, spawn_reaped
from ._transport import MAX_LINE_BYTES

__all__ = ["start_on_host"]

#: The channel's own timeout: the run's budgets (wall clock, cancel) end a run; this
#: only bounds an agent nobody stops.
HOST_TIMEOUT_S = 24 * 3600.0


async def start_on_host(
    argv: Sequence[str], env: Mapping[str, str], *, cwd: Path, home: Path
) -> Channel:
    """Start ``argv`` in its own session; ``home`` is removed when the channel ends."""
    try:
        process = await spawn_reaped(argv, cwd=cwd, env=env, limit=MAX_LINE_BYTES + 2)
    except OSError as exc:
        raise AgentNotInstalled(f"cannot start {argv[0]}: {exc.strerror or exc}") from exc
    return SubprocessChannel(process, home, HOST_TIMEOUT_S, reaper=True)
