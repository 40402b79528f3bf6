"""Hierarchical: an executive, department supervisors, workers.

The executive has one tool, ``send_to_department(department, task)``; each department
is a member (usually a :class:`Supervisor` over its workers). The executive answers
from what departments report back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from .._errors import PatternError
from .._messages import ToolResult, ToolSpec
from .._runcontext import RunContext
from ..agents import AgentContext
from ..engines import Engine
from ..tools import BaseTool, current_run
from ._base import Member, MemberLike, Pattern, Provenance, Result, as_member, call_member
from ._base import current_context as _current_context
from ._supervisor import delegations

__all__ = ["Department", "Hierarchical"]


class Department:
    __slots__ = ("description", "member")

    def __init__(self, member: MemberLike, description: str = "") -> None:
        self.member: Member = as_member(member)
        self.description = description


class _SendTool(BaseTool):
    timeout: float | None = 3600.0  # bounded by the run's budget and token instead

    def __init__(self, departments: Mapping[str, Department], caller: str) -> None:
        self.departments = dict(departments)
        self.caller = caller

    tool_id: ClassVar[str] = "send_to_department"

    @property
    def spec(self) -> ToolSpec:
        listing = "; ".join(
            f"{name}: {d.description}" if d.description else name
            for name, d in self.departments.items()
        )
        return ToolSpec(
            "send_to_department",
            f"Give a task to one department and get its report. Departments: {listing}.",
            {
                "type": "object",
                "properties": {
                    "department": {"type": "string", "enum": list(self.departments)},
                    "task": {"type": "string"},
                },
                "required": ["department", "task"],
            },
        )

    async def execute(self, **params: Any) -> ToolResult:
        department, task = str(params["department"]), str(params["task"])
        chosen = self.departments.get(department)
        if chosen is None:
            known = ", ".join(self.departments)
            return ToolResult(
                "send_to_department", f"Error: no department {department!r} ({known}).", False
            )
        run = current_run() or RunContext()
        result = await call_member(self.caller, chosen.member, task, _current_context(), run)
        return ToolResult(
            "send_to_department",
            result.content if result.success else f"Error: {result.error}",
            result.success,
            metadata={"provenance": result.provenance.to_dict()},
        )


class Hierarchical(Pattern):
    kind = "hierarchical"

    def __init__(
        self,
        engine: Engine,
        departments: Mapping[str, Department | MemberLike] | Sequence[MemberLike],
        *,
        model: str = "",
        system_prompt: str | None = None,
        max_turns: int = 10,
        temperature: float = 0.0,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        from ..agents import OrchestratorAgent

        if not isinstance(departments, Mapping):
            departments = {as_member(d).name: d for d in departments}
        if not departments:
            raise PatternError("a hierarchy needs at least one department")
        self.departments = {
            name: d if isinstance(d, Department) else Department(d)
            for name, d in departments.items()
        }
        self.executive = OrchestratorAgent(
            engine,
            model,
            tools=[_SendTool(self.departments, self.name)],
            system_prompt=system_prompt
            or (
                "You are the executive. Split the task, send each part to the department "
                "that owns it with send_to_department, then answer from their reports."
            ),
            max_turns=max_turns,
            temperature=temperature,
        )

    async def send_to_department(
        self, department: str, task: str, *, run: RunContext | None = None
    ) -> Result:
        """Give ``task`` to one department directly (no executive turn)."""
        chosen = self.departments.get(department)
        if chosen is None:
            raise PatternError(f"{self.name} has no department {department!r}")
        result = await self.call(chosen.member, task, None, run or RunContext())
        return result.passed_on(self.name, department=department)

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        outcome = await self.executive.arun(input, context, run=run)
        meta: list[object] = [r.metadata for r in outcome.tool_results]
        return Result(
            outcome.content,
            Provenance.own(self.name),
            outcome.usage,
            str(outcome.metadata.get("error") or ""),
            tool_results=list(outcome.tool_results),
            metadata={"delegations": delegations(meta)},
        )
