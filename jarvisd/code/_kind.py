"""The run kind "workspace" (``jarvisd.runs._kinds.KINDS``): a spec with a workspace
is a ``jarvis code`` run. The registry names this module, so ``runs/`` never imports
``code/``, which sits above it and calls ``run_spec`` back for its agent."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._job import run_code

if TYPE_CHECKING:
    from .._config import Config
    from .._runcontext import RunContext
    from ..engines import Engine
    from ..runs import AgentSpec, RunOutcome
    from ..runs._kinds import RunHow

__all__ = ["run_workspace"]


async def run_workspace(
    spec: AgentSpec, run: RunContext, config: Config, engine: Engine | None, how: RunHow, /
) -> RunOutcome:
    """``run_code``: its agent runs in the workspace's sandbox, where the caller's
    context, constructor arguments and tools do not reach (as before the registry)."""
    return await run_code(spec, run, config, engine)
