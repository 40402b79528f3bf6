"""The ray backend, on the daemon's side: each task's worker is a relay child process
(``_relay``) that runs the real worker on a Ray node. Ray itself is imported only in
that child, so the daemon's start-up and memory do not carry it."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from ._placement import needs

if TYPE_CHECKING:
    from jarvisd._config import Config
    from jarvisd.runs import AgentSpec

__all__ = ["RayBackend"]

RELAY_MODULE = "jarvisd.cluster._relay"


class RayBackend:
    """Tasks on the Ray cluster at ``[cluster] address``."""

    name = "ray"

    async def spawn(
        self, python: str, spec: AgentSpec, config: Config, limit: int
    ) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            python,
            "-m",
            RELAY_MODULE,
            config.cluster.address,
            json.dumps(needs(spec, config), sort_keys=True),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=limit,
        )

    def check(self, spec: AgentSpec, config: Config) -> None:
        return None
