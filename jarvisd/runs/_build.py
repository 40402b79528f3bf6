"""Building the agent a spec describes, and checking a spec before it is queued."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._config import Config
from .._errors import UsageError
from ..agents import AgentContext, AgentRegistry, BaseAgent
from ..engines import Engine
from ._options import check_options
from ._spec import AgentSpec

if TYPE_CHECKING:
    from ..executors import CodeExecutor
    from ..external import ExternalAgent, McpServer
    from ..tools import BaseTool

__all__ = [
    "BuildOptions",
    "build_agent",
    "load_context",
    "mcp_server_executor",
    "mcp_tool_names",
    "runs_sandboxed",
    "starts_mcp_servers",
    "validate_spec",
]


def mcp_tool_names(spec: AgentSpec, config: Config) -> list[str]:
    """The tool names of ``spec`` that belong to a configured MCP server (SERVER.tool)."""
    if not config.mcp.servers:
        return []
    servers = config.mcp.servers
    return [n for n in spec.tools if (p := n.strip().partition(".")) and p[1] and p[0] in servers]


def starts_mcp_servers(spec: AgentSpec, config: Config) -> bool:
    """Whether the run itself starts the MCP servers of the spec's tool names: not for
    an ACP agent, which is handed them and starts them itself, nor for a sandboxed run,
    whose agent starts them in the sandbox (``jarvisd.runs.SandboxedAgent``)."""
    if not mcp_tool_names(spec, config) or spec.isolation == "sandbox":
        return False
    if spec.team is None:
        definition = getattr(_checked(spec, config)[0], "definition", None)
        if definition is not None and definition.protocol == "acp":
            return False
    return True


def mcp_server_executor(spec: AgentSpec, config: Config) -> CodeExecutor | None:
    """Where the run's MCP servers run (for :class:`~jarvisd.mcp.McpToolset`): host
    processes (None) for an unsandboxed run; the sandbox backend for an agent in a
    sandbox of its own (openhands, claude_code unless ``--no-sandbox``), which calls
    them through the gateway: a contained agent's tools must not be a way out of it."""
    if spec.team is not None or spec.isolation == "host":
        return None
    if not getattr(_checked(spec, config)[0], "own_sandbox", False):
        return None
    from ..sandbox import executor_for_backend

    backend = config.sandbox.backend
    if backend == "none":
        raise UsageError(
            'MCP servers of a sandboxed run need sandbox.backend = "docker", "podman" or '
            '"bwrap" (it is "none"), or run it with --no-sandbox'
        )
    return executor_for_backend(backend, config)


def validate_spec(spec: AgentSpec, config: Config) -> type[BaseAgent]:
    """Refuse what can be refused before a run starts (unknown agent, options it does
    not declare, tools for an agent without tools, a team file that does not check);
    returns the agent class."""
    if spec.team is not None:
        return _team_checked(spec, config)
    return _checked(spec, config)[0]


def _team_checked(spec: AgentSpec, config: Config) -> type[BaseAgent]:
    from ..patterns import TeamAgent, parse_team

    if spec.isolation == "sandbox":
        raise UsageError("--sandbox runs one agent in a container; it cannot run a team")
    if spec.allow_net:
        raise UsageError(
            "--allow-net opens hosts to one sandboxed agent; it cannot apply to a team"
        )
    team = parse_team(spec.team or "")
    for table in team.agents.values():
        AgentRegistry.get(str(table["agent"]))
    return TeamAgent


def _checked(spec: AgentSpec, config: Config) -> tuple[type[BaseAgent], dict[str, object]]:
    """The agent class ``spec`` names and its options, typed; refusals as above."""
    key = spec.agent or config.agent.default
    agent_cls: type[BaseAgent] | None = None
    if key in config.agents.external:
        from ..external import external_agent_class

        agent_cls = external_agent_class(key, config)
    if agent_cls is None:
        agent_cls = AgentRegistry.get(key)
    options = check_options(key, agent_cls, spec.options)
    definition = getattr(agent_cls, "definition", None)  # an external agent's
    if definition is not None and definition.protocol == "acp":
        _check_acp_tools(key, spec, config, definition.limits_tools)
    elif spec.tools and not agent_cls.accepts_tools:
        raise UsageError(f"agent {key!r} does not accept tools (try --agent orchestrator)")
    if spec.allow_net:
        _check_allow_net(spec.allow_net)
    if spec.allow_net and not _in_sandbox(spec, agent_cls):
        raise UsageError(
            "--allow-net opens hosts to a sandboxed run (--sandbox, an external agent, "
            f"jarvis code): agent {key!r} runs on the host here"
            + (" (--no-sandbox)" if spec.isolation == "host" else "")
        )
    if spec.mounts and spec.isolation != "sandbox":
        # An ACP agent runs in its sandbox unless --no-sandbox: it takes mounts there.
        in_own_sandbox = definition is not None and definition.protocol == "acp"
        if spec.isolation == "host" or not in_own_sandbox:
            raise UsageError(
                f"--mount only applies with --sandbox (agent {key!r} runs on the host without it)"
                if spec.isolation != "host"
                else "--mount only applies in a sandbox, not with --no-sandbox"
            )
    return agent_cls, options


def _check_allow_net(entries: Sequence[str]) -> None:
    """``--allow-net`` entries parse (checked before a task is queued, not when it runs)."""
    from .._errors import ConfigError
    from ..netpolicy import NetPolicy

    try:
        NetPolicy.parse(allow=list(entries), source="--allow-net")
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _in_sandbox(spec: AgentSpec, agent_cls: type[BaseAgent]) -> bool:
    """Whether the run's agent runs in a sandbox of jarvis's (where a network policy
    applies): ``--sandbox``, a ``jarvis code`` run, an ACP agent or an agent with a
    container of its own unless ``--no-sandbox``."""
    if spec.isolation == "sandbox" or spec.workspace:
        return True
    if spec.isolation == "host":
        return False
    definition = getattr(agent_cls, "definition", None)
    acp = definition is not None and definition.protocol == "acp"
    return acp or bool(getattr(agent_cls, "own_sandbox", False))


def runs_sandboxed(spec: AgentSpec, config: Config) -> bool:
    """Whether ``spec``'s run happens in a sandbox (see ``_in_sandbox``)."""
    if spec.team is not None:
        return False
    if spec.isolation == "sandbox" or spec.workspace:
        return True
    return _in_sandbox(spec, _checked(spec, config)[0])


def _check_acp_tools(key: str, spec: AgentSpec, config: Config, limits_tools: bool) -> None:
    """An ACP agent brings its own tools: other names are some of those to hold it to,
    where jarvis can (``limits_tools``). MCP servers it takes only on the host: it
    starts each server itself, as its own child, and in the sandbox that child would be
    in its container, where the server's host program does not exist."""
    mcp_names = set(mcp_tool_names(spec, config))
    other = [n for n in spec.tools if n not in mcp_names]
    if other and not limits_tools:
        raise UsageError(
            f"agent {key!r} brings its own tools and jarvis cannot limit them; it takes "
            f"only MCP servers' tools (SERVER.tool, SERVER.*), not {', '.join(other)}"
        )
    if mcp_names and spec.isolation != "host":
        raise UsageError(
            f"agent {key!r} starts MCP servers itself, inside its container, where their "
            "commands are not installed: run it with --no-sandbox to hand it MCP servers"
        )


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """What the caller adds to the agent a spec describes, never from the edge."""

    #: Constructor arguments the caller sets itself (the in-container runner's
    #: plain-process ``executor``).
    extra: Mapping[str, object] = field(default_factory=dict)
    #: The run's started MCP tools (``jarvisd.mcp.McpToolset``), for the spec's MCP
    #: tool names.
    mcp_tools: Sequence[BaseTool] = ()


@dataclass(frozen=True, slots=True)
class _AgentArgs:
    """The constructor arguments of the spec's agent: what every agent takes, typed,
    and ``more`` (its declared options, typed by ``check_options`` against its
    constructor, then the caller's extra and what its branch adds)."""

    temperature: float
    max_tokens: int
    system_prompt: str | None = None
    more: Mapping[str, object] = field(default_factory=dict)

    def with_more(self, **more: object) -> _AgentArgs:
        return dataclasses.replace(self, more={**self.more, **more})

    def keywords(self) -> dict[str, Any]:
        # Any: the keywords differ by agent class, each checked against its constructor.
        found: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.system_prompt is not None:
            found["system_prompt"] = self.system_prompt
        return {**self.more, **found}  # the spec's own settings win, as ever


def build_agent(
    spec: AgentSpec, config: Config, engine: Engine, options: BuildOptions | None = None
) -> BaseAgent:
    """The agent ``spec`` describes, on ``engine``: a team, an external agent, an agent
    with a container of its own, an agent in a sandbox of jarvis's
    (``isolation="sandbox"``), else an agent on the host."""
    options = options or BuildOptions()
    if spec.team is not None:
        return _team(spec, config, engine)
    agent_cls, declared = _checked(spec, config)
    args = _AgentArgs(
        temperature=config.agent.temperature if spec.temperature is None else spec.temperature,
        max_tokens=spec.max_tokens or config.agent.max_tokens,
        system_prompt=spec.system_prompt,
        more={**declared, **options.extra},
    )
    if agent_cls.accepts_tools:
        from ..tools import build_tools

        mcp_names = set(mcp_tool_names(spec, config))
        names = [n for n in spec.tools if n not in mcp_names]
        args = args.with_more(
            tools=[*build_tools(names, config, engine), *options.mcp_tools],
            max_turns=spec.max_turns or config.agent.max_turns,
        )
    from ..external import ExternalAgent

    if issubclass(agent_cls, ExternalAgent):
        return _external(agent_cls, spec, config, engine, args)
    if getattr(agent_cls, "own_sandbox", False):  # claude_code: a container of its own
        args = args.with_more(config=config, sandboxed=spec.isolation != "host")
        return agent_cls(engine, spec.model, **args.keywords())
    if spec.isolation == "sandbox":
        from ._sandboxed import sandboxed_agent

        return sandboxed_agent(spec.agent or config.agent.default, spec, config, engine)
    return _on_the_host(agent_cls, spec, config, engine, args)


def _external(
    agent_cls: type[ExternalAgent],
    spec: AgentSpec,
    config: Config,
    engine: Engine,
    args: _AgentArgs,
) -> BaseAgent:
    """An external agent. It has its own sandbox (the default) and its own model calls:
    no tools of ours, only the MCP servers its tool names mention, which it starts
    itself; other names are its own tools to hold it to."""
    mcp_names = set(mcp_tool_names(spec, config))
    return agent_cls(
        engine,
        spec.model,
        config=config,
        sandboxed=spec.isolation != "host",
        mcp_servers=_acp_servers(spec, config),
        own_tools=tuple(n.strip() for n in spec.tools if n not in mcp_names),
        max_turns=spec.max_turns,
        mounts=spec.mounts,
        **args.keywords(),
    )


def _on_the_host(
    agent_cls: type[BaseAgent], spec: AgentSpec, config: Config, engine: Engine, args: _AgentArgs
) -> BaseAgent:
    """A built-in agent in this process. Its executor and network switch come from this
    config, not one the agent would load itself: the daemon's reloaded config and the
    in-container runner's choices must hold."""
    if agent_cls.runs_code and "executor" not in args.more:
        from ..executors import executor_for

        args = args.with_more(executor=executor_for(config))
    if agent_cls.fetches_urls and "allow_network" not in args.more:
        args = args.with_more(allow_network=config.tools.allow_network)
    return agent_cls(engine, spec.model, **args.keywords())


def _acp_servers(spec: AgentSpec, config: Config) -> tuple[McpServer, ...]:
    """The servers of the spec's MCP tool names, for an ACP agent's ``session/new``: the
    whole server, whichever of its tools are named (ACP hands over servers, not tools)."""
    names = [n.strip().partition(".")[0] for n in mcp_tool_names(spec, config)]
    if not names:
        return ()
    from ..external import McpServer
    from ..mcp import acp_mcp_servers

    return tuple(
        McpServer(s.name, s.command, s.args, tuple(s.env.items()))
        for s in acp_mcp_servers(config, names)
    )


def _team(spec: AgentSpec, config: Config, engine: Engine) -> BaseAgent:
    from ..patterns import AgentDefaults, TeamAgent, build_team, parse_team

    _team_checked(spec, config)
    defaults = AgentDefaults(
        model=spec.model,
        temperature=config.agent.temperature if spec.temperature is None else spec.temperature,
        max_tokens=spec.max_tokens or config.agent.max_tokens,
        max_turns=spec.max_turns or config.agent.max_turns,
    )
    root = build_team(parse_team(spec.team or ""), engine, config, defaults)
    return TeamAgent(engine, root)


def load_context(spec: AgentSpec) -> AgentContext | None:
    """The agent context ``spec.context_file`` gives (rlm keeps it in its REPL)."""
    if spec.context_file is None:
        return None
    path = Path(spec.context_file).expanduser()
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read context file {path}: {exc.strerror}") from exc
    return AgentContext(metadata={"context": text, "context_file": str(path)})
