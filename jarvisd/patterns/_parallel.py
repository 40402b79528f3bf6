"""Parallel: the same input to every member at once.

``all``: every answer, under ``## member`` headings; one failure fails the whole (the
others are cancelled, nothing half-done is presented as complete). ``first``: the first
successful answer; the members still running are cancelled (their tool calls get
synthetic results, their containers and processes are stopped by their own cleanup).
``synthesize``: every answer, then a synthesizer member writes the result from them.
An optional ``timeout`` (seconds) bounds the wait: members still running then are
cancelled and count as failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Literal

from .._errors import PatternError
from .._runcontext import RunContext
from ..agents import AgentContext
from ._base import (
    Member,
    MemberLike,
    Pattern,
    Provenance,
    Result,
    as_member,
    sections,
    total_usage,
    unique_members,
)

__all__ = ["Parallel"]

Mode = Literal["all", "first", "synthesize"]


class Parallel(Pattern):
    kind = "parallel"

    def __init__(
        self,
        members: Sequence[MemberLike],
        *,
        mode: Mode = "all",
        synthesizer: MemberLike | None = None,
        timeout: float | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        if mode not in ("all", "first", "synthesize"):
            raise PatternError(f"parallel mode must be all, first or synthesize, not {mode!r}")
        if (mode == "synthesize") != (synthesizer is not None):
            raise PatternError("a synthesizer is needed by, and only by, mode 'synthesize'")
        self.members = unique_members(members, "a parallel pattern")
        self.mode = mode
        self.synthesizer: Member | None = None if synthesizer is None else as_member(synthesizer)
        self.timeout = timeout

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        if self.mode == "first":
            return await self.run_first(input, context, run)
        results = await self.run_all(input, context, run)
        if self.mode == "all":
            return Result(
                sections(results),
                Provenance.own(self.name),
                total_usage(results),
                members=tuple(results),
            )
        return await self.synthesize(input, results, context, run)

    def _start(
        self, input: str, context: AgentContext | None, run: RunContext
    ) -> list[asyncio.Task[Result]]:
        return [
            asyncio.ensure_future(self.call(m, input, _copy(context), run)) for m in self.members
        ]

    async def run_all(
        self, input: str, context: AgentContext | None, run: RunContext
    ) -> list[Result]:
        """Every member's result, in member order; the first failure cancels the rest
        and raises :class:`PatternError`."""
        tasks = self._start(input, context, run)
        try:
            async with asyncio.timeout(self.timeout):
                for next_done in asyncio.as_completed(tasks):
                    result = await next_done
                    if not result.success:
                        raise PatternError(
                            f"{self.name}: member {result.provenance.producer!r} failed: "
                            f"{result.error}"
                        )
        except TimeoutError:
            late = [m.name for m, t in zip(self.members, tasks, strict=True) if not t.done()]
            raise PatternError(
                f"{self.name}: {', '.join(late)} did not finish within {self.timeout:g} s"
            ) from None
        finally:
            await _cancel(tasks)
        return [t.result() for t in tasks]

    async def run_first(self, input: str, context: AgentContext | None, run: RunContext) -> Result:
        """The first successful result; every member still running is cancelled."""
        tasks = self._start(input, context, run)
        failures: list[Result] = []
        try:
            async with asyncio.timeout(self.timeout):
                for next_done in asyncio.as_completed(tasks):
                    result = await next_done
                    if result.success:
                        return result.passed_on(self.name)
                    failures.append(result)
        except TimeoutError:
            failures.append(
                Result("", Provenance.own(self.name), error=f"timed out after {self.timeout:g} s")
            )
        finally:
            await _cancel(tasks)
        return Result(
            "",
            Provenance.own(self.name),
            total_usage(failures),
            "; ".join(f"{f.provenance.producer}: {f.error}" for f in failures),
            members=tuple(failures),
        )

    async def synthesize(
        self, input: str, results: list[Result], context: AgentContext | None, run: RunContext
    ) -> Result:
        assert self.synthesizer is not None  # mode "synthesize" requires one (__init__)
        ask = (
            f"Task: {input}\n\nAnswers from {len(results)} members:\n\n{sections(results)}\n\n"
            "Write the single best answer to the task from these."
        )
        final = await self.call(self.synthesizer, ask, context, run)
        passed = final.passed_on(self.name)
        passed.members = (*results, final)
        passed.usage = total_usage(passed.members)
        return passed


def _copy(context: AgentContext | None) -> AgentContext | None:
    # Members run at once: each gets its own list, so none sees another's writes.
    if context is None:
        return None
    return AgentContext(
        list(context.conversation),
        list(context.tools),
        list(context.memory_results),
        dict(context.metadata),
    )


async def _cancel(tasks: Sequence[asyncio.Task[Result]]) -> None:
    """Cancel the tasks still running, wait until each has finished its cleanup, and
    collect every task's outcome: a member that failed after the first failure (a
    spent budget reaches all of them) is accounted for, never left unretrieved."""
    for task in tasks:
        if not task.done():
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
