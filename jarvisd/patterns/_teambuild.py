"""Building a :class:`TeamFile` into members on one engine, and the agent that runs a
team through the run contract (``jarvis ask --team``, ``jarvis task submit --team``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .._config import Config
from .._errors import UsageError
from .._runcontext import RunContext
from ..agents import AgentContext, AgentRegistry, AgentResult, BaseAgent
from ..engines import Engine
from ._base import Member, as_member
from ._debate import Debate
from ._handoff import Handoff, WithHandoffs
from ._hierarchical import Department, Hierarchical
from ._network import Network
from ._parallel import Parallel
from ._plan_execute import PlanAndExecute
from ._reflective import Reflective
from ._router import Route, Router
from ._supervisor import Supervisor
from ._teamfile import TeamFile
from ._teamlead import TeamLead
from ._toolplan import ToolPlanner

__all__ = ["AgentDefaults", "TeamAgent", "build_team"]


@dataclass(frozen=True, slots=True)
class AgentDefaults:
    """What a team's agent gets for a field its table leaves out (the run's values)."""

    model: str = ""
    temperature: float = 0.7
    max_tokens: int = 1024
    max_turns: int = 10


def build_team(
    team: TeamFile, engine: Engine, config: Config, defaults: AgentDefaults | None = None
) -> Member:
    """The team's root member, every agent and pattern built once (a member named twice
    in the tree is one object)."""
    defaults = defaults or AgentDefaults()
    built: dict[str, Member] = {}
    agents: dict[str, BaseAgent] = {}

    def agent(name: str) -> BaseAgent:
        if name not in agents:
            agents[name] = _agent(name, team.agents[name], engine, config, defaults)
        return agents[name]

    def member(name: str) -> Member:
        if name not in built:
            if name in team.agents:
                built[name] = as_member(agent(name), name)
            else:
                built[name] = _pattern(
                    name, team.patterns[name], member, agent, engine, config, defaults
                )
        return built[name]

    return member(team.root)


def _agent(
    name: str, table: Mapping[str, Any], engine: Engine, config: Config, defaults: AgentDefaults
) -> BaseAgent:
    key = str(table["agent"])
    agent_cls = AgentRegistry.get(key)
    kwargs: dict[str, Any] = {
        "temperature": table.get("temperature", defaults.temperature),
        "max_tokens": table.get("max_tokens", defaults.max_tokens),
    }
    if "system_prompt" in table:
        kwargs["system_prompt"] = table["system_prompt"]
    tools = table.get("tools") or []
    if agent_cls.accepts_tools:
        from ..tools import build_tools

        kwargs["tools"] = build_tools(tools, config, engine)
        kwargs["max_turns"] = table.get("max_turns", defaults.max_turns)
    elif tools:
        raise UsageError(f"team agent {name!r}: agent {key!r} does not accept tools")
    if agent_cls.runs_code:
        from ..executors import executor_for

        kwargs["executor"] = executor_for(config)
    if agent_cls.fetches_urls:
        kwargs["allow_network"] = config.tools.allow_network
    return agent_cls(engine, str(table.get("model", defaults.model)), **kwargs)


@dataclass(frozen=True, slots=True)
class _Parts:
    """What a pattern's table is built with: its members (built once, by name), its
    agents (for handoffs), the engine, and the model its planners use."""

    name: str
    table: Mapping[str, Any]
    member: Callable[[str], Member]
    agent: Callable[[str], BaseAgent]
    engine: Engine
    config: Config
    defaults: AgentDefaults
    model: str
    descriptions: Mapping[str, str]

    def members(self, key: str) -> list[Member]:
        return [self.member(n) for n in self.table[key]]

    def optional(self, key: str) -> Member | None:
        return self.member(self.table[key]) if key in self.table else None

    def get(self, key: str, default: Any = None) -> Any:
        return self.table.get(key, default)


def _pattern(
    name: str,
    table: Mapping[str, Any],
    member: Callable[[str], Member],
    agent: Callable[[str], BaseAgent],
    engine: Engine,
    config: Config,
    defaults: AgentDefaults,
) -> Member:
    kind = table["pattern"]
    build = _BUILDERS.get(kind)
    if build is None:
        raise UsageError(f"unknown pattern {kind!r}")  # parse_team refuses these first
    model = str(table.get("model", defaults.model))
    descriptions: Mapping[str, str] = table.get("descriptions", {})
    return build(_Parts(name, table, member, agent, engine, config, defaults, model, descriptions))


def _router(p: _Parts) -> Member:
    routes = [Route(p.member(n), p.descriptions.get(n, "")) for n in p.table["routes"]]
    return Router(p.engine, routes, fallback=p.optional("fallback"), model=p.model, name=p.name)


def _parallel(p: _Parts) -> Member:
    return Parallel(
        p.members("members"),
        mode=p.get("mode", "all"),
        synthesizer=p.optional("synthesizer"),
        timeout=p.get("timeout"),
        name=p.name,
    )


def _supervisor(p: _Parts) -> Member:
    return Supervisor(
        p.engine,
        p.members("workers"),
        model=p.model,
        system_prompt=p.get("system_prompt"),
        max_turns=p.get("max_turns", p.defaults.max_turns),
        name=p.name,
    )


def _network(p: _Parts) -> Member:
    return Network(
        p.members("peers"),
        rounds=p.get("rounds", 2),
        synthesizer=p.optional("synthesizer"),
        name=p.name,
    )


def _hierarchical(p: _Parts) -> Member:
    departments = {
        n: Department(p.member(n), p.descriptions.get(n, "")) for n in p.table["departments"]
    }
    return Hierarchical(
        p.engine, departments, model=p.model, system_prompt=p.get("system_prompt"), name=p.name
    )


def _reflective(p: _Parts) -> Member:
    return Reflective(
        p.member(p.table["actor"]),
        p.member(p.table["critic"]),
        max_rounds=p.get("max_rounds", 3),
        name=p.name,
    )


def _debate(p: _Parts) -> Member:
    return Debate(
        p.members("debaters"), p.member(p.table["judge"]), rounds=p.get("rounds", 2), name=p.name
    )


def _plan_and_execute(p: _Parts) -> Member:
    return PlanAndExecute(
        p.engine,
        p.members("executors"),
        model=p.model,
        max_replans=p.get("max_replans", 1),
        descriptions=dict(p.descriptions),
        name=p.name,
    )


def _planned(p: _Parts) -> Member:
    from ._planning import Planned, PlanningConfig

    planning = PlanningConfig(
        enabled=True,
        model=p.model,
        always=p.get("always", False),
        min_complexity=p.get("min_complexity", 2),
        max_replans=p.get("max_replans", 0),
    )
    return Planned(p.member(p.table["member"]), planning, engine=p.engine, name=p.name)


def _team_lead(p: _Parts) -> Member:
    return TeamLead(
        p.engine,
        p.members("members"),
        strategy=p.get("strategy", "sequential"),
        model=p.model,
        max_assignments=p.get("max_assignments", 6),
        name=p.name,
    )


def _handoffs(p: _Parts) -> Member:
    from ..agents import ToolUsingAgent

    source = p.agent(p.table["agent"])
    if not isinstance(source, ToolUsingAgent):
        raise UsageError(
            f"team pattern {p.name!r}: agent {p.table['agent']!r} cannot hand off "
            "(it calls no tools; use orchestrator)"
        )
    return WithHandoffs(source, [Handoff(p.member(n)) for n in p.table["targets"]], name=p.name)


def _tool_plan(p: _Parts) -> Member:
    from ..tools import build_tools

    tools = build_tools(p.table["tools"], p.config, p.engine)
    return ToolPlanner(p.engine, tools, model=p.model, name=p.name)


#: Each pattern of a team file (``_teamfile``'s schema) and what builds it.
_BUILDERS: dict[str, Callable[[_Parts], Member]] = {
    "router": _router,
    "parallel": _parallel,
    "supervisor": _supervisor,
    "network": _network,
    "hierarchical": _hierarchical,
    "reflective": _reflective,
    "debate": _debate,
    "plan_and_execute": _plan_and_execute,
    "planned": _planned,
    "team_lead": _team_lead,
    "handoffs": _handoffs,
    "tool_plan": _tool_plan,
}


class TeamAgent(BaseAgent):
    """A team behind the agent contract: the run contract runs it like any agent."""

    agent_id: ClassVar[str] = "team"

    def __init__(self, engine: Engine, root: Member) -> None:
        super().__init__(engine)
        self.root = root

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> AgentResult:
        run = self._run_context(run)
        self._emit_turn_start(run, input, team=self.root.name)
        # One level down: the team's own agents emit turn events too, and a trace (and
        # the daemon) take a depth-0 turn end as the end of the run.
        result = await self.root.arun(input, context, run=run.child())
        self._emit_turn_end(run, content=result.content)
        outcome = result.to_agent_result()
        outcome.metadata["team"] = self.root.name
        return outcome
