"""SimpleAgent: one inference call, no tools."""

from __future__ import annotations

from typing import ClassVar

from .._runcontext import RunContext
from ._base import AgentContext, AgentResult, BaseAgent

__all__ = ["SimpleAgent"]


class SimpleAgent(BaseAgent):
    agent_id: ClassVar[str] = "simple"

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> AgentResult:
        run = self._run_context(run)
        self._emit_turn_start(run, input)
        generation = await self._generate(run, self._build_messages(input, context), stream=True)
        content = self.strip_think_tags(generation.content)
        self._emit_turn_end(run, turns=1, content=content)
        return AgentResult(
            content=content,
            turns=1,
            metadata={"model": generation.model, "finish_reason": generation.finish_reason.value},
            usage=generation.usage,
        )
