"""SelfCorrecting: retry a member while a predicate rejects its answer, in the same
conversation: each retry sees its earlier answers and the feedback they got.

``check(result)`` returns None to accept, or the reason to reject; the reason goes into
``feedback`` (a template with ``{reason}``). After ``max_retries`` the last answer is
returned as a failure that says why, never as if accepted.
"""

from __future__ import annotations

from collections.abc import Callable

from .._errors import PatternError
from .._events import EventType
from .._messages import Message
from .._runcontext import RunContext
from ..agents import AgentContext
from ._base import Member, MemberLike, Pattern, Result, as_member, total_usage

__all__ = ["SelfCorrecting"]

FEEDBACK = "Your answer was not accepted: {reason}\nAnswer the request again, fixing that."


class SelfCorrecting(Pattern):
    kind = "self_correcting"

    def __init__(
        self,
        member: MemberLike,
        check: Callable[[Result], str | None],
        *,
        feedback: str = FEEDBACK,
        max_retries: int = 2,
        name: str | None = None,
    ) -> None:
        self.member: Member = as_member(member)
        super().__init__(name or self.member.name)
        if max_retries < 0:
            raise PatternError("max_retries cannot be negative")
        if "{reason}" not in feedback:
            raise PatternError("the feedback template needs a {reason} field")
        self.check = check
        self.feedback = feedback
        self.max_retries = max_retries

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        conversation = list(context.conversation) if context else []
        metadata = dict(context.metadata) if context else {}
        ask = input
        attempts: list[Result] = []
        while True:
            # Not call_member: this wrapper stands for the member itself.
            result = await self.member.arun(
                ask, AgentContext(list(conversation), metadata=metadata), run=run
            )
            attempts.append(result)
            reason = result.error or self.check(result)
            if not reason:
                break
            if len(attempts) > self.max_retries:
                result.error = f"rejected after {len(attempts)} attempts: {reason}"
                break
            self.emit(run, EventType.STEP, step=len(attempts), status="retry", detail=reason)
            conversation += [Message.user(ask), Message.assistant(result.content)]
            ask = self.feedback.format(reason=reason)
        result.metadata["attempts"] = len(attempts)
        result.usage = total_usage(attempts)
        return result
