"""``run_spec``: the one place where a run is wired together and its outcome shaped.

``jarvis ask`` in process, the daemon's ``ask`` worker, task workers and the
in-container runner all call it. It owns the engine (built from the spec, closed
afterwards, unless the caller passed a warm one), applies the run's budgets, records
the run for ``jarvis trace``, and turns every way a run can end into a
:class:`RunOutcome`: it never raises for a run that failed, only returns its failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .._config import Config
from .._errors import JarvisError, NoAnswer
from .._runcontext import RunContext, RunStopped, watch_wall
from ..agents import AgentContext, AgentResult
from ..engines import Engine, engine_for_agent, select_engine
from ._build import (
    BuildOptions,
    build_agent,
    load_context,
    mcp_server_executor,
    runs_sandboxed,
    starts_mcp_servers,
)
from ._kinds import RunHow, runner_for
from ._outcome import Failure, RunOutcome
from ._spec import AgentSpec

if TYPE_CHECKING:
    from ..netpolicy import NetEvent, NetPolicy
    from ..tools import BaseTool

__all__ = ["apply_budgets", "run_agent", "run_spec"]

log = logging.getLogger(__name__)


def apply_budgets(spec: AgentSpec, config: Config, run: RunContext) -> None:
    """Set the run's budgets from the spec, else the config (0 there: unlimited), where
    the caller has not set them, and the fraction at which the ledger warns."""
    agent = config.agent
    budget = run.budget
    if budget.max_tokens is None:
        budget.max_tokens = spec.max_tokens_total or agent.max_tokens_total or None
    if budget.max_calls is None:
        budget.max_calls = spec.max_calls or agent.max_calls or None
    if budget.max_tool_calls is None:
        budget.max_tool_calls = spec.max_tool_calls or agent.max_tool_calls or None
    if budget.max_wall is None:
        budget.max_wall = spec.max_wall or agent.max_wall or None
    budget.warn_at = agent.budget_warning


async def run_spec(
    spec: AgentSpec,
    run: RunContext,
    config: Config,
    engine: Engine | None = None,
    *,
    context: AgentContext | None = None,
    extra: Mapping[str, object] | None = None,
    trace: bool = True,
    tools: Sequence[BaseTool] = (),
) -> RunOutcome:
    """Run ``spec`` under ``run`` to its outcome. An engine passed in (the daemon keeps
    them warm) is not closed here. ``context`` replaces the one ``spec.context_file``
    gives; ``extra`` goes to the agent's constructor (see ``build_agent``); ``trace``
    records the run for ``jarvis trace`` (top-level runs only); ``tools`` are MCP tools
    served elsewhere, given to the agent with the spec's own (the sandbox runner's
    proxies of the host's). The spec's kind chooses what runs it (``KINDS``): a spec
    with a ``workspace`` is a ``jarvis code`` run (``jarvisd.code.run_code``).

    A sandboxed run whose network policy allows hosts (``[sandbox.network]``, the
    agent's ``[agents.network]`` entry, ``--allow-net``) gets its egress proxy for its
    whole length (``jarvisd.sandbox._netrun``): its sandboxes mount the proxy's socket
    (``run.egress``), each connection is a ``net_connect`` event, and the outcome's
    metadata carries ``network`` (a summary). Nothing allowed: no proxy, as before."""
    how = RunHow(context=context, extra=dict(extra or {}), trace=trace, tools=tuple(tools))
    try:
        runner = runner_for(spec.kind)
        policy = _network_policy(spec, run, config)
    except JarvisError as exc:  # a bad entry, an unknown agent: the run's failure
        return RunOutcome(agent=spec.agent or config.agent.default, failure=Failure.of(exc))
    if policy is None:
        return await runner(spec, run, config, engine, how)
    if config.sandbox.backend == "none":
        from ..sandbox._netrun import NO_POLICY_WARNING

        log.warning("%s", NO_POLICY_WARNING)
        outcome = await runner(spec, run, config, engine, how)
        return _with_network(outcome, {"warning": NO_POLICY_WARNING})
    from .._events import EventType
    from ..sandbox._netrun import RunNetwork
    from ..sandbox._policy import SandboxPolicy

    def publish(event: NetEvent) -> None:
        run.bus.publish(EventType.NET_CONNECT, **event.to_dict())

    try:
        sandbox = SandboxPolicy.from_config(config)
        network = RunNetwork(policy, uid=sandbox.uid, gid=sandbox.gid, publish=publish)
        await network.__aenter__()
    except (JarvisError, OSError) as exc:  # the proxy could not start: nothing ran
        return RunOutcome(agent=spec.agent or config.agent.default, failure=Failure.of(exc))
    run.egress = network.socket_path
    try:
        outcome = await runner(spec, run, config, engine, how)
    finally:
        run.egress = ""
        await network.__aexit__(None, None, None)
    return _with_network(outcome, network.summary.to_dict())


def _network_policy(spec: AgentSpec, run: RunContext, config: Config) -> NetPolicy | None:
    """The run's network policy when it allows something and the run is sandboxed
    (None: no proxy). A run inside another's proxy (``run.egress``) starts none."""
    if run.egress or spec.team is not None:
        return None
    net = config.sandbox.network
    if not (spec.allow_net or net.allow or config.agents.network):
        return None  # the common case, decided without importing the policy
    from ..sandbox._netrun import network_policy

    policy = network_policy(config, spec.allow_net, spec.agent or config.agent.default)
    if policy.empty or not runs_sandboxed(spec, config):
        return None
    return policy


def _with_network(outcome: RunOutcome, network: Mapping[str, object]) -> RunOutcome:
    return dataclasses.replace(outcome, metadata={**outcome.metadata, "network": dict(network)})


async def run_agent(
    spec: AgentSpec, run: RunContext, config: Config, engine: Engine | None, how: RunHow, /
) -> RunOutcome:
    """The runner of the kinds "agent" and "team" (``KINDS``): the agent is built here,
    on ``engine`` or one selected for the spec (then closed afterwards)."""
    context, extra, trace, tools = how.context, how.extra, how.trace, how.tools
    start = time.perf_counter()
    agent_key = spec.agent or config.agent.default
    explicit = engine_for_agent(config, spec.engine, agent_key)
    engine_name = explicit or config.engine.default
    own_engine = engine is None
    collector = None
    if trace and run.depth == 0:
        from ..traces import TraceCollector

        collector = TraceCollector(run_id=run.run_id).attach(run.bus)
    apply_budgets(spec, config, run)
    disarm = watch_wall(run)
    result: AgentResult | None = None
    failure: Failure | None = None
    stopped_turns = 0  # of a run stopped before its agent returned
    try:
        if engine is None:
            engine = select_engine(config, explicit, spec.model, spec.env)
        engine_name = engine.name
        async with contextlib.AsyncExitStack() as stack:
            mcp_tools = list(tools)
            if starts_mcp_servers(spec, config):
                # Started for this run only, and stopped when it ends, however it ends.
                from ..mcp import McpToolset

                toolset = await stack.enter_async_context(
                    McpToolset(config, mcp_server_executor(spec, config))
                )
                mcp_tools += await toolset.tools(spec.tools)
            options = BuildOptions(extra=extra, mcp_tools=mcp_tools)
            agent = build_agent(spec, config, engine, options)
            result = await agent.arun(
                spec.input, context if context is not None else load_context(spec), run=run
            )
    except (JarvisError, RunStopped) as exc:
        failure = Failure.of(exc)
        stopped_turns = exc.turns if isinstance(exc, RunStopped) else 0
    except Exception as exc:
        log.exception("the run failed")
        failure = Failure.of(exc)
    finally:
        disarm()
        if own_engine and engine is not None:
            await engine.aclose()
    model = spec.model
    if result is not None:
        failure = _no_answer(result)
        model = str(result.metadata.get("model") or model)
    if not model and engine is not None:
        model = engine.default_model()
    if collector is not None:
        collector.detach(run.bus, "" if failure is None else f"{failure.code}: {failure.message}")
    return RunOutcome(
        answer="" if result is None or failure is not None else result.content,
        agent=agent_key,
        engine=engine_name,
        model=model,
        turns=stopped_turns if result is None else result.turns,
        usage=run.budget.used if result is None else result.usage,
        tool_results=() if result is None else tuple(result.tool_results),
        metadata={} if result is None else dict(result.metadata),
        duration_s=round(time.perf_counter() - start, 3),
        failure=failure,
    )


def _no_answer(result: AgentResult) -> Failure | None:
    """The failure of a run that ended without an answer (the agent says why in its
    metadata: an unusable reply, the turn limit), or None."""
    error = result.metadata.get("error")
    if error or result.metadata.get("max_turns_exceeded"):
        message = result.content.removeprefix("Error: ") or str(error)
        return Failure.of(NoAnswer(message))
    return None
