"""A run's kind (an agent, a team, a ``jarvis code`` workspace) and what runs it.

Chosen from a registry of ``"module:attr"`` strings, resolved on first use (as the
agents' and uvicorn's registries are): ``runs/`` names the layer above it (``code/``)
without importing it. ``jarvisd.code.run_code`` calls ``run_spec`` back for its agent,
so importing ``code/`` here would be a cycle. Every runner has one shape,
:class:`KindRunner`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from .._errors import UsageError
from .._plugins import import_from_string

if TYPE_CHECKING:
    from .._config import Config
    from .._runcontext import RunContext
    from ..agents import AgentContext
    from ..engines import Engine
    from ..tools import BaseTool
    from ._outcome import RunOutcome
    from ._spec import AgentSpec

__all__ = ["KINDS", "KindRunner", "RunHow", "runner_for"]

#: A spec's kind (``AgentSpec.kind``) -> the runner of that kind.
KINDS: Mapping[str, str] = {
    "agent": "jarvisd.runs._execute:run_agent",
    "team": "jarvisd.runs._execute:run_agent",  # a TeamAgent, built as an agent is
    "workspace": "jarvisd.code._kind:run_workspace",
}


@dataclass(frozen=True, slots=True)
class RunHow:
    """The caller's choices for one run besides its spec (see ``run_spec``)."""

    context: AgentContext | None = None
    extra: Mapping[str, object] = field(default_factory=dict)
    trace: bool = True
    tools: Sequence[BaseTool] = ()


class KindRunner(Protocol):
    """Runs a spec of its kind to its outcome (never raises for a run that failed)."""

    def __call__(
        self,
        spec: AgentSpec,
        run: RunContext,
        config: Config,
        engine: Engine | None,
        how: RunHow,
        /,
    ) -> Awaitable[RunOutcome]: ...


def runner_for(kind: str) -> KindRunner:
    """The runner of ``kind`` (imported now, the first time)."""
    target = KINDS.get(kind)
    if target is None:
        raise UsageError(f"unknown run kind {kind!r} ({', '.join(KINDS)})")
    runner: KindRunner = import_from_string(target)
    return runner
