"""Supervisor: a tool-using agent whose tools are its workers.

The supervisor decides which worker to ask, with what, how often, and writes the
answer itself from what they returned (the answer is its own: not delegated). Each
worker call runs in a child of the run, so workers spend the same budget and stop
with the same cancel token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._runcontext import RunContext
from ..agents import AgentContext
from ..engines import Engine
from ..tools import BaseTool
from ._base import MemberLike, Pattern, Provenance, Result, unique_members
from ._subagent import AgentTool

__all__ = ["Supervisor", "delegations"]

DEFAULT_PROMPT = (
    "You lead a team. Give each part of the task to the worker whose tool fits it, "
    "then answer the task yourself from what they returned."
)


def delegations(result_metadata: Sequence[Any]) -> list[dict[str, Any]]:
    return [m["provenance"] for m in result_metadata if isinstance(m.get("provenance"), dict)]


class Supervisor(Pattern):
    kind = "supervisor"

    def __init__(
        self,
        engine: Engine,
        workers: Sequence[MemberLike],
        *,
        model: str = "",
        system_prompt: str | None = None,
        max_turns: int = 10,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        share_history: bool = False,
        share_state: bool = False,
        extra_tools: Sequence[BaseTool] = (),
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        from ..agents import OrchestratorAgent

        self.workers = unique_members(workers, "a supervisor")
        self.tools: list[BaseTool] = [
            AgentTool(w, share_history=share_history, share_state=share_state, caller=self.name)
            for w in self.workers
        ]
        self.tools.extend(extra_tools)
        self.agent = OrchestratorAgent(
            engine,
            model,
            tools=self.tools,
            system_prompt=system_prompt or DEFAULT_PROMPT,
            max_turns=max_turns,
            temperature=temperature,
            max_tokens=max_tokens,
        )

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        outcome = await self.agent.arun(input, context, run=run)
        error = str(outcome.metadata.get("error") or "")
        if outcome.metadata.get("max_turns_exceeded"):
            error = f"{self.name} stopped at its turn limit"
        return Result(
            outcome.content,
            Provenance.own(self.name),
            outcome.usage,
            error,
            tool_results=list(outcome.tool_results),
            metadata={"delegations": delegations([r.metadata for r in outcome.tool_results])},
        )
