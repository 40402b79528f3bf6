"""Running an agent from a plain description: the one path that ``jarvis ask`` (in
process), the daemon's tasks and the sandbox runner all take.

An :class:`AgentSpec` is a typed, JSON-able description of one run (what the daemon
stores in SQLite); :func:`run_agent` builds the engine, tools and agent (wrapped in the
sandbox when asked) and runs it under a :class:`RunContext`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._config import Config, load_config
from ._errors import UsageError
from ._run import RunContext
from .agents import AgentContext, AgentRegistry, AgentResult, BaseAgent
from .engines import Engine, select_engine

__all__ = ["AgentSpec", "build_agent", "run_agent"]


@dataclass(frozen=True, slots=True)
class AgentSpec:
    input: str
    agent: str = ""  # empty: config agent.default
    engine: str | None = None  # None: config / auto
    model: str = ""
    tools: tuple[str, ...] = ()
    sandbox: bool = False
    mounts: tuple[str, ...] = ()  # "PATH" or "PATH:rw"
    context_file: str | None = None  # given to the agent as metadata["context"] (rlm)
    temperature: float | None = None
    max_tokens: int | None = None
    max_turns: int | None = None
    system_prompt: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)  # agent-specific extras

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["tools"] = list(self.tools)
        data["mounts"] = list(self.mounts)
        data["options"] = dict(self.options)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise UsageError(f"unknown agent spec fields: {', '.join(sorted(unknown))}")
        if not isinstance(data.get("input"), str):
            raise UsageError("agent spec needs an 'input' string")
        values = dict(data)
        values["tools"] = tuple(values.get("tools") or ())
        values["mounts"] = tuple(values.get("mounts") or ())
        values["options"] = dict(values.get("options") or {})
        return cls(**values)


def build_agent(spec: AgentSpec, config: Config, engine: Engine) -> BaseAgent:
    """The agent ``spec`` describes, on ``engine`` (sandboxed when ``spec.sandbox``)."""
    key = spec.agent or config.agent.default
    agent_cls = AgentRegistry.get(key)
    kwargs: dict[str, Any] = dict(spec.options)
    kwargs.setdefault("temperature", spec.temperature if spec.temperature is not None
                      else config.agent.temperature)  # fmt: skip
    kwargs.setdefault("max_tokens", spec.max_tokens or config.agent.max_tokens)
    if spec.system_prompt is not None:
        kwargs.setdefault("system_prompt", spec.system_prompt)
    if agent_cls.accepts_tools:
        from .tools import build_tools

        kwargs.setdefault("tools", build_tools(spec.tools, config, engine))
        kwargs.setdefault("max_turns", spec.max_turns or config.agent.max_turns)
    elif spec.tools:
        raise UsageError(f"agent {key!r} does not accept tools (try --agent orchestrator)")
    if spec.sandbox:
        from .sandbox import sandboxed_agent

        sandboxed: BaseAgent = sandboxed_agent(key, spec, config, engine)
        return sandboxed
    # From this config, not one the agent would load itself: the daemon's reloaded
    # config and the in-container runner's choices must hold.
    if agent_cls.runs_code and "executor" not in kwargs:
        from .executors import executor_for

        kwargs["executor"] = executor_for(config)
    if agent_cls.fetches_urls:
        kwargs.setdefault("allow_network", config.tools.allow_network)
    return agent_cls(engine, spec.model, **kwargs)


def _context(spec: AgentSpec) -> AgentContext | None:
    if spec.context_file is None:
        return None
    path = Path(spec.context_file).expanduser()
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read context file {path}: {exc.strerror}") from exc
    return AgentContext(metadata={"context": text, "context_file": str(path)})


async def run_agent(
    spec: AgentSpec,
    run: RunContext | None = None,
    *,
    config: Config | None = None,
    engine: Engine | None = None,
) -> AgentResult:
    """Run ``spec`` to its result. The engine is closed afterwards only if built here."""
    from .traces import TraceCollector

    config = config or load_config()
    run = run or RunContext()
    own_engine = engine is None
    engine = engine or select_engine(config, spec.engine, spec.model)
    # Every top-level run is recorded for `jarvis trace`; nested agents share its bus.
    collector = TraceCollector(run_id=run.run_id).attach(run.bus) if run.depth == 0 else None
    error = ""
    try:
        agent = build_agent(spec, config, engine)
        return await agent.arun(spec.input, _context(spec), run=run)
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        if collector is not None:
            collector.detach(run.bus, error)
        if own_engine:
            await engine.aclose()
