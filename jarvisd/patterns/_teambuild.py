"""Building a :class:`TeamFile` into members on one engine, and the agent that runs a
team through the run contract (``jarvis ask --team``, ``jarvis task submit --team``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .._config import Config
from .._errors import UsageError
from .._run import RunContext
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


def _pattern(
    name: str,
    table: Mapping[str, Any],
    member: Any,
    agent: Any,
    engine: Engine,
    config: Config,
    defaults: AgentDefaults,
) -> Member:
    kind = table["pattern"]
    model = str(table.get("model", defaults.model))
    descriptions: Mapping[str, str] = table.get("descriptions", {})

    def members(key: str) -> list[Member]:
        return [member(n) for n in table[key]]

    def optional(key: str) -> Member | None:
        return member(table[key]) if key in table else None

    if kind == "router":
        routes = [Route(member(n), descriptions.get(n, "")) for n in table["routes"]]
        return Router(engine, routes, fallback=optional("fallback"), model=model, name=name)
    if kind == "parallel":
        return Parallel(
            members("members"),
            mode=table.get("mode", "all"),
            synthesizer=optional("synthesizer"),
            timeout=table.get("timeout"),
            name=name,
        )
    if kind == "supervisor":
        return Supervisor(
            engine,
            members("workers"),
            model=model,
            system_prompt=table.get("system_prompt"),
            max_turns=table.get("max_turns", defaults.max_turns),
            name=name,
        )
    if kind == "network":
        return Network(
            members("peers"),
            rounds=table.get("rounds", 2),
            synthesizer=optional("synthesizer"),
            name=name,
        )
    if kind == "hierarchical":
        departments = {
            n: Department(member(n), descriptions.get(n, "")) for n in table["departments"]
        }
        return Hierarchical(
            engine, departments, model=model, system_prompt=table.get("system_prompt"), name=name
        )
    if kind == "reflective":
        return Reflective(
            member(table["actor"]),
            member(table["critic"]),
            max_rounds=table.get("max_rounds", 3),
            name=name,
        )
    if kind == "debate":
        return Debate(
            members("debaters"), member(table["judge"]), rounds=table.get("rounds", 2), name=name
        )
    if kind == "plan_and_execute":
        return PlanAndExecute(
            engine,
            members("executors"),
            model=model,
            max_replans=table.get("max_replans", 1),
            descriptions=dict(descriptions),
            name=name,
        )
    if kind == "planned":
        from ._planning import Planned, PlanningConfig

        planning = PlanningConfig(
            enabled=True,
            model=model,
            always=table.get("always", False),
            min_complexity=table.get("min_complexity", 2),
            max_replans=table.get("max_replans", 0),
        )
        return Planned(member(table["member"]), planning, engine=engine, name=name)
    if kind == "team_lead":
        return TeamLead(
            engine,
            members("members"),
            strategy=table.get("strategy", "sequential"),
            model=model,
            max_assignments=table.get("max_assignments", 6),
            name=name,
        )
    if kind == "handoffs":
        from ..agents import ToolUsingAgent

        source = agent(table["agent"])
        if not isinstance(source, ToolUsingAgent):
            raise UsageError(
                f"team pattern {name!r}: agent {table['agent']!r} cannot hand off "
                "(it calls no tools; use orchestrator)"
            )
        return WithHandoffs(source, [Handoff(member(n)) for n in table["targets"]], name=name)
    if kind == "tool_plan":
        from ..tools import build_tools

        return ToolPlanner(
            engine, build_tools(table["tools"], config, engine), model=model, name=name
        )
    raise UsageError(f"unknown pattern {kind!r}")  # parse_team refuses these first


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
