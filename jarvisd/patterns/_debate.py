"""Debate: N agents argue over rounds, a judge decides.

In each round every debater states its position at once, seeing the positions of the
previous round (its own included); the judge then reads the whole debate and gives
the answer, which is passed on.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._errors import PatternError
from .._events import EventType
from .._runcontext import RunContext
from ..agents import AgentContext
from ._base import (
    Member,
    MemberLike,
    Pattern,
    Result,
    as_member,
    gather_all,
    total_usage,
    unique_members,
)

__all__ = ["Debate"]


class Debate(Pattern):
    kind = "debate"

    def __init__(
        self,
        debaters: Sequence[MemberLike],
        judge: MemberLike,
        *,
        rounds: int = 2,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.debaters = unique_members(debaters, "a debate")
        if len(self.debaters) < 2 or rounds < 1:
            raise PatternError("a debate needs at least two debaters and one round")
        self.judge: Member = as_member(judge)
        self.rounds = rounds

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        transcript: list[str] = []
        spoken: list[Result] = []
        previous = ""
        for number in range(1, self.rounds + 1):
            self.emit(run, EventType.ROUND, round=number, of=self.rounds)
            asks = [
                f"Question: {input}\n\n"
                + (f"Positions in the previous round:\n{previous}\n\n" if previous else "")
                + f"You are {d.name}. State your position and your strongest argument."
                for d in self.debaters
            ]
            results = await gather_all(
                [self.call(d, a, context, run) for d, a in zip(self.debaters, asks, strict=True)]
            )
            spoken.extend(results)
            failed = [r for r in results if not r.success]
            if failed:
                raise PatternError(f"{self.name}: {failed[0].provenance.producer} failed")
            previous = "\n".join(
                f"[{d.name}] {r.content}" for d, r in zip(self.debaters, results, strict=True)
            )
            transcript.append(f"Round {number}:\n{previous}")
        verdict = await self.call(
            self.judge,
            f"Question: {input}\n\nThe debate:\n\n"
            + "\n\n".join(transcript)
            + "\n\nJudge the debate and give the final answer to the question.",
            None,
            run,
        )
        result = verdict.passed_on(self.name, rounds=self.rounds)
        result.members = (*spoken, verdict)
        result.usage = total_usage(result.members)
        return result
