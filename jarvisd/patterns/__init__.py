"""Composition patterns: agents and patterns composed behind one interface.

Every agent (wrapped by :class:`AgentMember`) and every pattern is a :class:`Member`:
``await member.arun(input, context, run=run)`` returns a :class:`Result` that records
who produced it (:class:`Provenance`). Members of a pattern run in ``run.child()``, so
one budget ledger and one cancel token hold across the whole tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr

if TYPE_CHECKING:
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
    from ._composite import Completion, Composite, Delegate, Steps, StepState
    from ._contracts import ContractError, Returns, parse_as, returns
    from ._debate import Debate
    from ._handoff import Handoff, WithHandoffs
    from ._harness import Harness
    from ._hierarchical import Department, Hierarchical
    from ._network import Network
    from ._parallel import Parallel
    from ._plan_execute import Plan, PlanAndExecute, PlanItem
    from ._planning import Planned, PlanningConfig, complexity
    from ._reflective import Reflective
    from ._router import Route, Router, parse_choice
    from ._selfcorrect import SelfCorrecting
    from ._subagent import AgentTool
    from ._supervisor import Supervisor
    from ._teambuild import AgentDefaults, TeamAgent, build_team
    from ._teamfile import TeamFile, parse_team
    from ._teamlead import TeamLead
    from ._toolplan import PlanStep, ToolPlan, ToolPlanner, execute_plan
    from ._workflow import AgentTarget, FromSpeaker, RouteTo, TerminateTarget, Workflow, route_to

# Names load on first use: the CLI checks a team file (._teamfile, standard library
# only) without loading agents and engines.
_LAZY = {
    "Steps": "._composite",
    "StepState": "._composite",
    "Delegate": "._composite",
    "Composite": "._composite",
    "Completion": "._composite",
    "route_to": "._workflow",
    "Workflow": "._workflow",
    "TerminateTarget": "._workflow",
    "RouteTo": "._workflow",
    "FromSpeaker": "._workflow",
    "AgentTarget": "._workflow",
    "AgentDefaults": "._teambuild",
    "AgentMember": "._base",
    "AgentTool": "._subagent",
    "ContractError": "._contracts",
    "Debate": "._debate",
    "Department": "._hierarchical",
    "Handoff": "._handoff",
    "Harness": "._harness",
    "Hierarchical": "._hierarchical",
    "Member": "._base",
    "Network": "._network",
    "Parallel": "._parallel",
    "Pattern": "._base",
    "Plan": "._plan_execute",
    "PlanAndExecute": "._plan_execute",
    "PlanItem": "._plan_execute",
    "Planned": "._planning",
    "PlanningConfig": "._planning",
    "complexity": "._planning",
    "PlanStep": "._toolplan",
    "Provenance": "._base",
    "Reflective": "._reflective",
    "Result": "._base",
    "Returns": "._contracts",
    "Route": "._router",
    "Router": "._router",
    "SelfCorrecting": "._selfcorrect",
    "Supervisor": "._supervisor",
    "TeamAgent": "._teambuild",
    "TeamFile": "._teamfile",
    "TeamLead": "._teamlead",
    "ToolPlan": "._toolplan",
    "ToolPlanner": "._toolplan",
    "WithHandoffs": "._handoff",
    "as_member": "._base",
    "build_team": "._teambuild",
    "call_member": "._base",
    "current_context": "._base",
    "execute_plan": "._toolplan",
    "parse_as": "._contracts",
    "parse_choice": "._router",
    "parse_team": "._teamfile",
    "returns": "._contracts",
}

__all__ = [
    "AgentDefaults",
    "AgentMember",
    "AgentTarget",
    "AgentTool",
    "Completion",
    "Composite",
    "ContractError",
    "Debate",
    "Delegate",
    "Department",
    "FromSpeaker",
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
    "Planned",
    "PlanningConfig",
    "Provenance",
    "Reflective",
    "Result",
    "Returns",
    "Route",
    "RouteTo",
    "Router",
    "SelfCorrecting",
    "StepState",
    "Steps",
    "Supervisor",
    "TeamAgent",
    "TeamFile",
    "TeamLead",
    "TerminateTarget",
    "ToolPlan",
    "ToolPlanner",
    "WithHandoffs",
    "Workflow",
    "as_member",
    "build_team",
    "call_member",
    "complexity",
    "current_context",
    "execute_plan",
    "parse_as",
    "parse_choice",
    "parse_team",
    "returns",
    "route_to",
]

__getattr__ = lazy_getattr(__name__, _LAZY)
