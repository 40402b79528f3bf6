"""Router: one model call picks the member for a request, by number.

Small models are asked for a single number (1..N, 0 when none fits) rather than a name or
JSON: it is the one format they keep to. Any reply that is not a number in range
(empty, prose, 0) goes to the fallback member; without a fallback, to the first route
for an unreadable reply, and to a failed result when the model said 0 (none fits).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .._events import EventType
from .._messages import Message, SamplingOptions
from .._runcontext import RunContext
from ..agents import AgentContext, strip_think_tags
from ..engines import Engine, RunEngine
from ._base import Member, MemberLike, Pattern, Provenance, Result, as_member

__all__ = ["Route", "Router", "parse_choice"]

_NUMBER = re.compile(r"\d+")


@dataclass(frozen=True, slots=True)
class Route:
    member: Member
    description: str = ""


def parse_choice(reply: str, routes: int) -> int | None:
    """The route number a reply names (0: none), or None when it names no number in
    range. The first number counts: "2. billing" and "Route 2" are both 2."""
    match = _NUMBER.search(strip_think_tags(reply))
    if match is None or len(match.group()) > 6:
        return None
    value = int(match.group())
    return value if 0 <= value <= routes else None


class Router(Pattern):
    kind = "router"

    def __init__(
        self,
        engine: Engine,
        routes: Sequence[Route | MemberLike | tuple[MemberLike, str]],
        *,
        fallback: MemberLike | None = None,
        model: str = "",
        name: str | None = None,
        instructions: str = "",
    ) -> None:
        super().__init__(name)
        self.engine = engine
        self.model = model
        self.routes = [_route(r) for r in routes]
        if not self.routes:
            from .._errors import PatternError

            raise PatternError("a router needs at least one route")
        self.fallback = None if fallback is None else as_member(fallback)
        self.instructions = instructions

    def prompt(self, input: str) -> list[Message]:
        # The request and the numbered options in one user message, the question last:
        # small models given the options in the system prompt and the request alone
        # were seen to answer 0 for a request that plainly fit a route.
        options = "\n".join(
            f"{i}. {r.member.name}" + (f": {r.description}" if r.description else "")
            for i, r in enumerate(self.routes, 1)
        )
        ask = (
            f"Request: {input}\n\nHandlers:\n{options}\n\nWhich handler fits the request "
            f"best? Reply with its number (1 to {len(self.routes)}), or 0 if none fits."
        )
        system = self.instructions or "You route requests. Reply with one number only."
        return [Message.system(system), Message.user(ask)]

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        engine = RunEngine.bind(self.engine, run)
        generation = await engine.generate(
            self.prompt(input),
            model=self.model,
            options=SamplingOptions(temperature=0.0, max_tokens=8),
        )
        choice = parse_choice(generation.content, len(self.routes))
        member: Member | None
        if choice:
            member, fell_back = self.routes[choice - 1].member, False
        else:
            member, fell_back = self.fallback, True
            if member is None and choice is None:
                member = self.routes[0].member
        self.emit(
            run,
            EventType.ROUTE_CHOSEN,
            choice=choice if choice is not None else -1,
            member=member.name if member else "",
            fallback=fell_back,
            reply=generation.content[:200],
        )
        if member is None:
            return Result(
                "", Provenance.own(self.name), generation.usage, "no route fits the request"
            )
        result = await self.call(member, input, context, run)
        passed = result.passed_on(self.name, route=member.name, route_choice=choice)
        passed.usage = passed.usage + generation.usage
        return passed


def _route(item: Route | MemberLike | tuple[MemberLike, str]) -> Route:
    if isinstance(item, Route):
        return item
    if isinstance(item, tuple):
        return Route(as_member(item[0]), item[1])
    return Route(as_member(item))
