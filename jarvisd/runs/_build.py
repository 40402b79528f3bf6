"""Building the agent a spec describes, and checking a spec before it is queued."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    from ..external import McpServer
    from ..tools import BaseTool

__all__ = [
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
    whose agent starts them in the sandbox (``jarvisd.sandbox.SandboxedAgent``)."""
    if not mcp_tool_names(spec, config) or spec.sandbox:
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
    if spec.team is not None or spec.no_sandbox:
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

    if spec.sandbox:
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
            + (" (--no-sandbox)" if spec.no_sandbox else "")
        )
    if spec.mounts and not spec.sandbox:
        # An ACP agent runs in its sandbox unless --no-sandbox: it takes mounts there.
        in_own_sandbox = definition is not None and definition.protocol == "acp"
        if spec.no_sandbox or not in_own_sandbox:
            raise UsageError(
                f"--mount only applies with --sandbox (agent {key!r} runs on the host without it)"
                if not spec.no_sandbox
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
    if spec.sandbox or spec.workspace:
        return True
    if spec.no_sandbox:
        return False
    definition = getattr(agent_cls, "definition", None)
    acp = definition is not None and definition.protocol == "acp"
    return acp or bool(getattr(agent_cls, "own_sandbox", False))


def runs_sandboxed(spec: AgentSpec, config: Config) -> bool:
    """Whether ``spec``'s run happens in a sandbox (see ``_in_sandbox``)."""
    if spec.team is not None:
        return False
    if spec.sandbox or spec.workspace:
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
    if mcp_names and not spec.no_sandbox:
        raise UsageError(
            f"agent {key!r} starts MCP servers itself, inside its container, where their "
            "commands are not installed: run it with --no-sandbox to hand it MCP servers"
        )


def build_agent(
    spec: AgentSpec,
    config: Config,
    engine: Engine,
    *,
    extra: Mapping[str, object] | None = None,
    mcp_tools: Sequence[BaseTool] = (),
) -> BaseAgent:
    """The agent ``spec`` describes, on ``engine`` (sandboxed when ``spec.sandbox``).
    ``extra`` are constructor arguments the caller sets itself, never from the edge
    (the in-container runner's plain-process ``executor``). ``mcp_tools`` are the run's
    started MCP tools (``jarvisd.mcp.McpToolset``), for the spec's MCP tool names."""
    if spec.team is not None:
        return _team(spec, config, engine)
    agent_cls, options = _checked(spec, config)
    key = spec.agent or config.agent.default
    kwargs: dict[str, Any] = {**options, **(extra or {})}
    kwargs["temperature"] = (
        spec.temperature if spec.temperature is not None else config.agent.temperature
    )
    kwargs["max_tokens"] = spec.max_tokens or config.agent.max_tokens
    if spec.system_prompt is not None:
        kwargs["system_prompt"] = spec.system_prompt
    if agent_cls.accepts_tools:
        from ..tools import build_tools

        mcp_names = set(mcp_tool_names(spec, config))
        names = [n for n in spec.tools if n not in mcp_names]
        kwargs["tools"] = [*build_tools(names, config, engine), *mcp_tools]
        kwargs["max_turns"] = spec.max_turns or config.agent.max_turns
    from ..external import ExternalAgent

    if issubclass(agent_cls, ExternalAgent):
        # It has its own sandbox (the default) and its own model calls: no tools of
        # ours, only the MCP servers its tool names mention, which it starts itself;
        # other names are its own tools to hold it to.
        mcp_names = set(mcp_tool_names(spec, config))
        return agent_cls(
            engine, spec.model, config=config, sandboxed=not spec.no_sandbox,
            mcp_servers=_acp_servers(spec, config),
            own_tools=tuple(n.strip() for n in spec.tools if n not in mcp_names),
            max_turns=spec.max_turns, mounts=spec.mounts, **kwargs,
        )  # fmt: skip
    if getattr(agent_cls, "own_sandbox", False):  # claude_code: a container of its own
        kwargs.update(config=config, sandboxed=not spec.no_sandbox)
        return agent_cls(engine, spec.model, **kwargs)
    if spec.sandbox:
        from ..sandbox import sandboxed_agent

        return sandboxed_agent(key, spec, config, engine)
    # From this config, not one the agent would load itself: the daemon's reloaded
    # config and the in-container runner's choices must hold.
    if agent_cls.runs_code and "executor" not in kwargs:
        from ..executors import executor_for

        kwargs["executor"] = executor_for(config)
    if agent_cls.fetches_urls:
        kwargs.setdefault("allow_network", config.tools.allow_network)
    return agent_cls(engine, spec.model, **kwargs)


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
