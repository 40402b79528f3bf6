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
from ._handoff import Handoff, WithHandoffs
from ._hierarchical import Department, Hierarchical
from ._network import Network
from ._parallel import Parallel
from ._router import Route, Router, parse_choice
from ._subagent import AgentTool
from ._supervisor import Supervisor
from ._toolplan import PlanStep, ToolPlan, ToolPlanner, execute_plan

__all__ = [
    "AgentMember",
    "AgentTool",
    "ContractError",
    "Department",
    "Handoff",
    "Hierarchical",
    "Member",
    "Network",
    "Parallel",
    "Pattern",
    "PlanStep",
    "Provenance",
    "Result",
    "Returns",
    "Route",
    "Router",
    "Supervisor",
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
