"""Composition patterns: agents and patterns composed behind one interface.

Every agent (wrapped by :class:`AgentMember`) and every pattern is a :class:`Member`:
``await member.arun(input, context, run=run)`` returns a :class:`Result` that records
who produced it (:class:`Provenance`). Members of a pattern run in ``run.child()``, so
one budget ledger and one cancel token hold across the whole tree.
"""

from ._base import (
    AgentMember,
    Member,
    Pattern,
    Provenance,
    Result,
    as_member,
    call_member,
    current_context,
)
from ._contracts import ContractError, Returns, parse_as, returns
from ._debate import Debate
from ._handoff import Handoff, WithHandoffs
from ._harness import Harness
from ._hierarchical import Department, Hierarchical
from ._network import Network
from ._parallel import Parallel
from ._plan_execute import Plan, PlanAndExecute, PlanItem
from ._reflective import Reflective
from ._router import Route, Router, parse_choice
from ._selfcorrect import SelfCorrecting
from ._subagent import AgentTool
from ._supervisor import Supervisor
from ._teamlead import TeamLead
from ._toolplan import PlanStep, ToolPlan, ToolPlanner, execute_plan

__all__ = [
    "AgentMember",
    "AgentTool",
    "ContractError",
    "Debate",
    "Department",
    "Handoff",
    "Harness",
    "Hierarchical",
    "Member",
    "Network",
    "Parallel",
    "Pattern",
    "Plan",
    "PlanAndExecute",
    "PlanItem",
    "PlanStep",
    "Provenance",
    "Reflective",
    "Result",
    "Returns",
    "Route",
    "Router",
    "SelfCorrecting",
    "Supervisor",
    "TeamLead",
    "ToolPlan",
    "ToolPlanner",
    "WithHandoffs",
    "as_member",
    "call_member",
    "current_context",
    "execute_plan",
    "parse_as",
    "parse_choice",
    "returns",
]
