"""Network: peers discuss a task in rounds over one shared transcript.

Inside a round peers speak one after another, each seeing everything said before it
(this round's earlier speakers included). After the last round a synthesizer, when
given, writes the answer from the transcript; otherwise the last speaker's words are
the answer. :meth:`Network.broadcast` sends one message to every peer at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._errors import PatternError
from .._events import EventType
from .._messages import Message
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

__all__ = ["Network"]


class Network(Pattern):
    kind = "network"

    def __init__(
        self,
        peers: Sequence[MemberLike],
        *,
        rounds: int = 2,
        synthesizer: MemberLike | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        if rounds < 1:
            raise PatternError("a network needs at least one round")
        self.peers = unique_members(peers, "a network")
        self.rounds = rounds
        self.synthesizer: Member | None = None if synthesizer is None else as_member(synthesizer)

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        shared = AgentContext(
            conversation=list(context.conversation) if context else [],
            metadata=dict(context.metadata) if context else {},
        )
        spoken: list[Result] = []
        for number in range(1, self.rounds + 1):
            self.emit(run, EventType.ROUND, round=number, of=self.rounds)
            for peer in self.peers:
                ask = (
                    f"Task: {input}\n\nYou are {peer.name}, in round {number} of {self.rounds} "
                    "of a discussion. Add what you know; build on or correct what others said."
                )
                result = await self.call(peer, ask, _view(shared), run)
                spoken.append(result)
                if not result.success:
                    raise PatternError(f"{self.name}: {peer.name} failed: {result.error}")
                shared.conversation.append(Message.user(f"[{peer.name}] {result.content}"))
        if self.synthesizer is None:
            last = spoken[-1].passed_on(self.name)
            last.members = tuple(spoken)
            last.usage = total_usage(spoken)
            return last
        ask = (
            f"Task: {input}\n\nThe discussion is above. Write the final answer to the task from it."
        )
        final = await self.call(self.synthesizer, ask, _view(shared), run)
        passed = final.passed_on(self.name)
        passed.members = (*spoken, final)
        passed.usage = total_usage(passed.members)
        return passed

    async def broadcast(
        self, message: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> list[Result]:
        """Every peer's reply to ``message``, asked at once, in peer order."""
        run = run or RunContext()
        return await gather_all([self.call(p, message, _view(context), run) for p in self.peers])


def _view(context: AgentContext | None) -> AgentContext | None:
    # A peer gets a snapshot: what it appends to its own history is not the transcript.
    if context is None:
        return None
    return AgentContext(list(context.conversation), metadata=dict(context.metadata))
