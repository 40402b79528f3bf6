"""FakeHost: a :class:`~jarvisd.runs.Host` that answers from a script."""

from __future__ import annotations

from collections.abc import Iterable

from .._runcontext import RunContext
from ..runs._hosts import Host
from ..runs._outcome import RunOutcome
from ..runs._spec import AgentSpec

__all__ = ["FakeHost"]


class FakeHost(Host):
    """Runs nothing: each ``run`` takes the next scripted outcome (or raises the next
    scripted exception, e.g. ``DaemonUnavailable`` to test a fallback), streams its
    answer to ``run.on_delta`` in ``chunk``-sized pieces, and records the spec."""

    def __init__(self, script: Iterable[RunOutcome | BaseException] = (), chunk: int = 8) -> None:
        self.script = list(script)
        self.chunk = chunk
        self.specs: list[AgentSpec] = []

    def run(self, spec: AgentSpec, run: RunContext) -> RunOutcome:
        self.specs.append(spec)
        item = self.script.pop(0) if self.script else RunOutcome(answer="", agent=spec.agent)
        if isinstance(item, BaseException):
            raise item
        if run.on_delta is not None and item.ok:
            for start in range(0, len(item.answer), self.chunk):
                run.on_delta(item.answer[start : start + self.chunk])
        return item
