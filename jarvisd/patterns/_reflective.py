"""Reflective: an actor drafts, a critic reviews, the actor revises, for a few rounds.

The loop stops when the critic approves (by default its review contains ``APPROVED``;
``stop`` is any predicate of the review) or after ``max_rounds``. The answer is the
actor's last draft, passed on; ``metadata["approved"]`` says whether the critic
accepted it.
"""

from __future__ import annotations

from collections.abc import Callable

from .._errors import PatternError
from .._events import EventType
from .._runcontext import RunContext
from ..agents import AgentContext
from ._base import Member, MemberLike, Pattern, Result, as_member, total_usage

__all__ = ["Reflective", "approved"]

CRITIC_ASK = (
    "Task: {task}\n\nDraft answer:\n{draft}\n\nReview the draft. If it fully and correctly "
    "answers the task, reply with the single word APPROVED. Otherwise list what to fix."
)
REVISE_ASK = (
    "Task: {task}\n\nYour previous answer:\n{draft}\n\nA reviewer asked for these "
    "changes:\n{critique}\n\nWrite the improved answer only."
)


def approved(review: str) -> bool:
    return "APPROVED" in review.upper()


class Reflective(Pattern):
    kind = "reflective"

    def __init__(
        self,
        actor: MemberLike,
        critic: MemberLike,
        *,
        max_rounds: int = 3,
        stop: Callable[[str], bool] = approved,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        if max_rounds < 1:
            raise PatternError("a reflective pattern needs at least one round")
        self.actor: Member = as_member(actor)
        self.critic: Member = as_member(critic)
        self.max_rounds = max_rounds
        self.stop = stop

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        steps: list[Result] = []
        draft = await self.call(self.actor, input, context, run)
        steps.append(draft)
        accepted = False
        rounds = 0
        while draft.success and rounds < self.max_rounds:
            rounds += 1
            self.emit(run, EventType.ROUND, round=rounds, of=self.max_rounds)
            review = await self.call(
                self.critic, CRITIC_ASK.format(task=input, draft=draft.content), None, run
            )
            steps.append(review)
            if not review.success:
                break
            if self.stop(review.content):
                accepted = True
                break
            if rounds == self.max_rounds:
                break
            draft = await self.call(
                self.actor,
                REVISE_ASK.format(task=input, draft=draft.content, critique=review.content),
                context,
                run,
            )
            steps.append(draft)
        result = draft.passed_on(self.name, approved=accepted, rounds=rounds)
        result.members = tuple(steps)
        result.usage = total_usage(steps)
        return result
