"""ExternalAgent: an ACP coding agent (opencode, codex, claude, gemini, or one from
config) run as a jarvis agent, on the run's model.

One run: the agent is installed if it is not yet (with a message), an inference
gateway serves the run's engine for it (every request through ``RunEngine``: budget,
cancel, events), its per-run HOME and environment are prepared (:mod:`._registry`), it
is started in the sandbox (default) or on the host (``--no-sandbox``, with a warning
every run), and one ACP conversation (:func:`converse`) carries the question. The
answer is the text it streamed; its tool calls are the run's tool results.

Resuming (a daemon task): an ACP agent's state lives in its process and its HOME. A
task's HOME is durable (:mod:`._homes`), and once the agent's session is open, before
anything is prompted, the run checkpoints it (:class:`AcpCheckpoint`); after each tool
call the agent ends, again. When the daemon dies under the run, the task is resumed in
a new agent process (sandboxed as before) with the same HOME and ``session/load``
(:class:`~._session.Resume`), when the agent advertises ``loadSession``. An agent that
does not is marked not resumable, as is a frames agent: their state lived only in the
process. A crash before the session opened restarts the run from nothing (nothing was
asked of the agent yet).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .._errors import (
    AgentNotInstalled,
    ConfigError,
    ExternalAgentError,
    SandboxError,
    UsageError,
)
from .._messages import Usage
from .._runcontext import RunContext
from ..agents import AgentContext, AgentResult, BaseAgent
from ..engines import Engine
from ._client import AcpClient
from ._install import install, install_dir, installed, node_missing
from ._permissions import Approver, PermissionPolicy
from ._registry import AgentDefinition, GatewayAccess, Launch, Setup
from ._session import McpServer, Resume, converse
from ._workspace import Workspace

if TYPE_CHECKING:
    from .._config import Config
    from ..executors import Channel
    from ._agentpool import Claimed, Slot

__all__ = ["NOT_RESUMABLE", "AcpCheckpoint", "ExternalAgent"]

log = logging.getLogger(__name__)

NOT_RESUMABLE = (
    "an external agent keeps its state in its own process and does not checkpoint, so "
    "its run cannot be resumed (resubmit to run again)"
)
#: Why an ACP agent that cannot load a session is not resumed.
NO_LOAD_SESSION = (
    "the agent does not advertise loadSession (ACP), so its run cannot be resumed "
    "(resubmit to run again)"
)
#: Why an agent that worked on a copy of a private workspace is not resumed.
ON_A_COPY = (
    "the agent worked on a copy of the workspace, written back only at the end of its "
    "run, so its run cannot be resumed (resubmit to run again)"
)
#: The model name agents are given when the run names none (the gateway serves the
#: run's model whatever name an agent asks for).
DEFAULT_MODEL_NAME = "local"


@dataclass(frozen=True, slots=True)
class AcpCheckpoint:
    """A resumable ACP run's checkpoint: the agent's session, where its HOME and
    workspace are, and how many tool calls it had ended. It is taken before the
    prompt is sent, so a resume always assumes the prompt may have arrived (the
    session's replay says whether it did)."""

    agent: str
    session_id: str
    home: str
    cwd: str
    tool_calls: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "agent": self.agent,
            "session_id": self.session_id,
            "home": self.home,
            "cwd": self.cwd,
            "prompt_sent": True,
            "tool_calls": self.tool_calls,
            "resumable": True,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, object], agent: str) -> AcpCheckpoint:
        """Parse a stored state; raises ExternalAgentError (why) when it is not one
        this agent can resume from."""
        if state.get("resumable") is not True:
            raise ExternalAgentError(str(state.get("reason") or NOT_RESUMABLE))
        session_id, stored = state.get("session_id"), state.get("agent")
        if not isinstance(session_id, str) or not session_id or stored != agent:
            raise ExternalAgentError(
                f"the checkpoint is not one of agent {agent}'s sessions: not resumed"
            )
        tool_calls = state.get("tool_calls")
        return cls(
            agent,
            session_id,
            str(state.get("home") or ""),
            str(state.get("cwd") or ""),
            tool_calls if isinstance(tool_calls, int) else 0,
        )


class ExternalAgent(BaseAgent):
    """An external agent over ACP; subclasses name its :class:`AgentDefinition`."""

    agent_id: ClassVar[str] = "external"
    definition: ClassVar[AgentDefinition]

    def __init__(
        self,
        engine: Engine,
        model: str = "",
        *,
        config: Config | None = None,
        sandboxed: bool = True,
        workspace: str = "",
        approver: Approver | None = None,
        mcp_servers: tuple[McpServer, ...] = (),
        own_tools: tuple[str, ...] = (),
        max_turns: int | None = None,
        mounts: tuple[str, ...] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(engine, model, **kwargs)
        #: ``--mount`` requests: more host paths in its container, checked there like
        #: every mount (``sandbox.allowed_roots``).
        self.mounts = mounts
        #: The run's turn cap (``--max-turns``): its gateway counts model calls.
        self.max_turns = max_turns
        from .._config import Config

        self.config = config or Config()
        self.workspace = workspace
        #: In the sandbox unless the run said --no-sandbox.
        self.sandboxed = sandboxed
        self.approver = approver
        self.mcp_servers = mcp_servers
        #: The agent's own tools it is held to (``--tools``); empty: all of them.
        self.own_tools = own_tools

    def policy(self) -> PermissionPolicy:
        try:
            return PermissionPolicy.from_mapping(self.config.agents.permissions)
        except ValueError as exc:
            raise ConfigError(
                self.config.source or "<config>", "agents.permissions", str(exc)
            ) from None

    def _workspace(self) -> Workspace:
        root = Path(self.workspace or os.getcwd())
        if not root.is_absolute() or not root.is_dir():
            raise UsageError(f"the agent's workspace {str(root)!r} is not an existing directory")
        return Workspace(root, user=self._agent_user())

    def _agent_user(self) -> tuple[int, int] | None:
        """Whose permissions the agent's fs requests get: the sandbox user's when
        jarvis runs as root (the container's user); else jarvis's own, which the
        container (or the host process) runs as anyway."""
        if not self.sandboxed or os.geteuid() != 0:
            return None
        from ..sandbox._policy import SandboxPolicy

        policy = SandboxPolicy.from_config(self.config)
        return (policy.uid, policy.gid)

    async def _ensure_installed(self) -> Path:
        agent = self.definition
        why = node_missing(agent)
        if why is not None:
            raise AgentNotInstalled(why)
        if not installed(agent):
            log.warning(
                "installing agent %s on first use (`jarvis agents install %s`)",
                agent.name,
                agent.name,
            )
            await asyncio.to_thread(install, agent)
        return install_dir(agent)

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> AgentResult:
        run = self._run_context(run)
        # The turn's start and end name and close the run's trace (agent, input,
        # answer), as a built-in agent's do; a run that raises is closed by its caller.
        self._emit_turn_start(run, input)
        result = await self._converse(input, run)
        self._emit_turn_end(
            run,
            turns=result.turns,
            content=result.content,
            **({"error": result.metadata["error"]} if result.metadata.get("error") else {}),
        )
        return result

    async def _converse(self, input: str, run: RunContext) -> AgentResult:
        run.cancel.raise_if_cancelled()
        agent = self.definition
        resumed = None
        if agent.protocol == "frames":
            if run.resume is not None:
                raise ExternalAgentError(str(run.resume.get("reason") or NOT_RESUMABLE))
            if run.checkpoint is not None:
                run.checkpoint({"agent": agent.name, "resumable": False, "reason": NOT_RESUMABLE})
        elif run.resume is not None:
            resumed = AcpCheckpoint.from_state(run.resume, agent.name)
        workspace = self._workspace()
        self._check_credential(agent)
        if agent.builtin:
            where = await self._ensure_installed()
        else:
            where = Path(".")
        if not self.sandboxed:
            log.warning(
                "agent %s runs on the host with --no-sandbox: NOT isolated (it has your "
                "files and network)",
                agent.name,
            )
        used_before = run.budget.used
        # The ACP SDK (pydantic models) takes 0.3-0.6 s to import: in a thread while
        # the gateway and the agent start, not before them nor while its output waits.
        sdk = _preload("acp")
        if agent.protocol == "frames":
            return await self._frames(agent, where, input, workspace, run)
        client = AcpClient(
            run,
            workspace,
            agent=agent.name,
            policy=self.policy(),
            approver=self.approver or run.approver,
        )
        if agent.context:
            # Sized for the agent before it starts, rather than grown (a reload) when
            # its first prompt does not fit.
            await self.engine.reserve_context(agent.context)
        # An agent jarvisd started ahead, when the run fits one (``_agentpool``).
        claimed = await self._claim_slot(agent, where, workspace, run)
        slot = None if claimed is None else claimed.slot
        async with (
            self._home(run, fresh=resumed is None, slot=slot) as home,
            self._mirror(workspace) as copy,
            contextlib.AsyncExitStack() as on_slot,
        ):
            if not self.sandboxed:
                from ._terminals import Terminals

                client.terminals = Terminals(home)
            if resumed is not None:
                await self._end_earlier_agent()
            async with self._gateway(run, home, slot) as access:
                if claimed is not None:
                    channel = await on_slot.enter_async_context(
                        self._slot_channel(claimed, access, workspace)
                    )
                else:
                    channel = await self._start(agent, where, home, access, workspace, run, copy)
                try:
                    await sdk
                except BaseException:  # converse would have killed it: nothing else will
                    await channel.kill("closed")
                    raise
                stop_reason = await converse(
                    channel,
                    client,
                    cwd=workspace.root,
                    prompt=input,
                    run=run,
                    mcp_servers=self.mcp_servers,
                    terminal=not self.sandboxed,
                    resume=None if resumed is None else Resume(resumed.session_id),
                    on_session=self._checkpointer(
                        run, client, home, workspace, resumed, copied=copy is not None
                    ),
                )
        return self._answer(client, stop_reason, workspace, _minus(run.budget.used, used_before))

    def _checkpointer(
        self,
        run: RunContext,
        client: AcpClient,
        home: Path,
        workspace: Workspace,
        resumed: AcpCheckpoint | None,
        *,
        copied: bool = False,
    ) -> Callable[[str, bool], None] | None:
        """What checkpoints the run once its session is open (and, for an agent that
        can load sessions, after each tool call it ends); None: nothing to checkpoint.
        ``copied``: the agent works on a copy of the workspace, written back only when
        the run ends (``_mirror``): a crash loses the copy, so its session is not
        resumed against a workspace that lacks what it did."""
        save = run.checkpoint
        if save is None:
            return None
        agent = self.definition.name
        done = resumed.tool_calls if resumed is not None else 0

        def on_session(session_id: str, loads: bool) -> None:
            if not loads or copied:
                why = NO_LOAD_SESSION if not loads else ON_A_COPY
                save({"agent": agent, "resumable": False, "reason": why})
                return
            state = AcpCheckpoint(agent, session_id, str(home), str(workspace.root), done)
            save(state.to_dict())

            def on_tool_end() -> None:
                nonlocal state
                state = AcpCheckpoint(
                    agent, session_id, str(home), str(workspace.root), state.tool_calls + 1
                )
                save(state.to_dict())

            client.on_tool_end = on_tool_end

        return on_session

    async def _claim_slot(
        self, agent: AgentDefinition, where: Path, workspace: Workspace, run: RunContext
    ) -> Claimed | None:
        """A started agent of jarvisd's pool, attached, when this run fits its launch
        (nothing of its own the slot's container lacks), else None: the usual start
        (also when the claimed agent had ended: it is removed)."""
        from ..gateway._gateway import served_model_name
        from ..sandbox import DockerExecutor
        from ..sandbox._covers import unreachable
        from ..sandbox._policy import SandboxPolicy
        from ._agentpool import (
            POOLED,
            Claimed,
            attach_slot,
            claim_slot,
            fits_model,
            fits_slot,
            release,
        )

        model = served_model_name(self.model, self.engine)  # what the run's gateway hands
        if not (
            self.sandboxed
            and agent.name in POOLED
            and fits_model(agent, model)
            and self.config.agents.warm
            and os.geteuid() == 0
            and not (self.mounts or self.own_tools or run.egress)
            and not (run.sandbox_binds or run.sandbox_env)
            and run.checkpoint is None
            and run.resume is None
            and fits_slot(self.config, workspace.root)
        ):
            return None
        policy = SandboxPolicy.from_config(self.config)
        if unreachable(workspace.root, policy.uid, policy.gid):
            return None  # a copy is mounted instead: the usual start
        slot = await asyncio.to_thread(claim_slot, self.config, agent, where)
        if slot is None:
            return None
        executor = DockerExecutor(self.config, flavor=self.config.sandbox.backend)
        try:
            channel = await asyncio.to_thread(
                attach_slot, executor, slot, asyncio.get_running_loop()
            )
        except SandboxError as exc:
            log.info("agent pool: %s; starting one", exc)
            executor.close()
            await asyncio.to_thread(release, slot, self.config)
            return None
        return Claimed(slot, executor, channel)

    @contextlib.asynccontextmanager
    async def _slot_channel(
        self, claimed: Claimed, access: GatewayAccess, workspace: Workspace
    ) -> AsyncIterator[Channel]:
        """The channel to a claimed agent once the run's workspace is in its container
        and its gateway is bound to it; the workspace leaves the container at the end."""
        from ._agentpool import workspace_in
        from ._sandbox import _container_pid

        channel, executor = claimed.channel, claimed.executor
        with contextlib.ExitStack() as mounted:
            try:
                await asyncio.to_thread(
                    mounted.enter_context, workspace_in(claimed.slot, executor, workspace.root)
                )
                if access.peers is not None:
                    access.peers.bind(await asyncio.to_thread(_container_pid, channel))
                yield channel
            finally:  # the agent ends before its workspace leaves its container
                await channel.kill("closed")
                executor.close()

    @contextlib.asynccontextmanager
    async def _home(
        self, run: RunContext, *, fresh: bool, slot: Slot | None = None
    ) -> AsyncIterator[Path]:
        """The agent's HOME: a daemon task's durable one (kept for a resume, removed
        by the daemon when the task ends: :mod:`._homes`), a pooled agent's (``slot``,
        removed with it), else a temporary one."""
        if slot is not None:
            from ._agentpool import release

            try:
                yield slot.home
            finally:
                await asyncio.to_thread(release, slot, self.config)
            return
        if run.checkpoint is None or not run.run_id:
            async with _temporary_home() as home:
                yield home
            return
        from ._homes import task_home

        yield await asyncio.to_thread(task_home, run.run_id, fresh=fresh)

    async def _end_earlier_agent(self) -> None:
        """Before a resumed session is loaded, the agent that had it must be gone: a
        container whose worker died keeps running until the orphan sweep removes it,
        and two agents on one session would both act. (A host agent went with its
        worker: ``exit_host_gone``.)"""
        if not self.sandboxed:
            return
        from ..sandbox import sweep_orphans

        try:
            removed = await asyncio.to_thread(sweep_orphans, self.config)
        except Exception as exc:
            raise ExternalAgentError(
                f"cannot make sure the agent's earlier container is gone, so its session "
                f"is not resumed: {exc}"
            ) from exc
        if removed:
            log.info("removed %d orphaned sandbox containers before resuming", len(removed))

    def _answer(
        self, client: AcpClient, stop_reason: str, workspace: Workspace, usage: Usage
    ) -> AgentResult:
        """The result of a conversation that ended with ``stop_reason``: the text the
        agent streamed last, its tool calls, and why it is an error when it is one."""
        agent = self.definition
        answer = client.answer_text().strip()
        metadata: dict[str, object] = {
            "agent": agent.name,
            "stop_reason": stop_reason,
            "sandboxed": self.sandboxed,
            "workspace": str(workspace.root),
        }
        if self.model:
            metadata["model"] = self.model
        if stop_reason not in ("end_turn", "max_tokens"):
            metadata["error"] = f"the agent stopped its turn: {stop_reason}"
        elif not answer:
            metadata["error"] = "the agent ended its turn without an answer"
        return AgentResult(
            content=answer,
            tool_results=client.tool_results,
            turns=1,
            metadata=metadata,
            usage=usage,
        )

    async def _frames(
        self,
        agent: AgentDefinition,
        where: Path,
        input: str,
        workspace: Workspace,
        run: RunContext,
    ) -> AgentResult:
        """A program of jarvis's frame protocol: its ``infer`` frames are its model
        calls, so it needs no gateway (jarvisd.bridge.FrameSession)."""
        from ..bridge import FrameSession
        from ..protocol import ErrorFrame, ResultFrame, Start

        async with _temporary_home() as home:
            access = GatewayAccess(
                f"unix:{home / 'none.sock'}", "", self.model or DEFAULT_MODEL_NAME
            )
            channel = await self._start(agent, where, home, access, workspace, run)
            session = FrameSession(
                channel,
                self.engine,
                run,
                model=self.model,
                max_tokens=self.max_tokens,
                name=f"agent {agent.name}",
            )
            outcome = await session.run(
                Start(task="agent", payload={"input": input, "workspace": str(workspace.root)})
            )
        if outcome.stopped is not None:
            raise outcome.stopped
        run.cancel.raise_if_cancelled()
        final = outcome.final
        if isinstance(final, ResultFrame):
            result = AgentResult.from_dict(final.result)
            result.metadata.update(agent=agent.name, sandboxed=self.sandboxed)
            return result
        if isinstance(final, ErrorFrame):
            raise ExternalAgentError(
                f"agent {agent.name} failed ({final.code[:64]}): {final.message[:4000]}"
            )
        tail = "\n".join(outcome.process.stderr.strip().splitlines()[-5:])
        raise ExternalAgentError(
            f"agent {agent.name} ended without a result (exit {outcome.process.exit_code})"
            + (f":\n{tail}" if tail else "")
        )

    def _check_credential(self, agent: AgentDefinition) -> None:
        """Under ``--engine CREDENTIAL``: the agent must speak the vendor's dialect and
        know which of its models to ask for (before anything starts)."""
        from .._config import credential_dialect
        from ..engines import CredentialEngine
        from ..gateway._upstream import agent_family

        engine = self.engine
        if not isinstance(engine, CredentialEngine):
            return
        name, family = engine.credential_name, credential_dialect(engine.credential)
        if agent.dialect and agent_family(agent.dialect) != family:
            raise UsageError(
                f"agent {agent.name} speaks {agent.dialect}; credential {name!r} serves the "
                f"{family} API: use an agent of that API, or another credential"
            )
        if not (self.model or engine.default_model()):
            raise UsageError(
                f"name the model to ask credential {name!r}'s vendor for: --model, or "
                f"model in [credentials.{name}]"
            )

    @contextlib.asynccontextmanager
    async def _gateway(
        self, run: RunContext, home: Path, slot: Slot | None = None
    ) -> AsyncIterator[GatewayAccess]:
        from ._host import host_gateway
        from ._sandbox import sandbox_gateway

        # The model name an agent is given when the run names none.
        model = self.model or DEFAULT_MODEL_NAME
        opened = (
            sandbox_gateway(
                self.engine,
                run,
                self.model,
                home if slot is None else slot.sock_dir,
                name="gateway.sock" if slot is None else slot.socket_name,
                max_tokens=self.max_tokens,
                default_model=model,
                temperature=self.temperature,
                max_turns=self.max_turns,
                # A pooled agent's gateway: the token its agent read at its start.
                token=None if slot is None else slot.token,
            )
            if self.sandboxed
            else host_gateway(
                self.engine,
                run,
                self.model,
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                max_turns=self.max_turns,
            )
        )
        async with opened as access:
            yield access

    @contextlib.asynccontextmanager
    async def _mirror(self, workspace: Workspace) -> AsyncIterator[Path | None]:
        """A copy of the workspace for the sandbox user when it cannot enter the
        workspace itself (``_mirror``), written back when the block ends; else None."""
        from ..sandbox._covers import unreachable
        from ..sandbox._policy import SandboxPolicy

        policy = SandboxPolicy.from_config(self.config) if self.sandboxed else None
        if policy is None or not unreachable(workspace.root, policy.uid, policy.gid):
            yield None
            return
        from ._mirror import Mirror

        mirror = Mirror(workspace.root, (policy.uid, policy.gid))
        try:
            copy = await asyncio.to_thread(mirror.start)
            log.info("workspace %s is private: the agent works on a copy", workspace.root)
            workspace.tree = copy  # its fs requests too: written back with the rest
            yield copy
            workspace.tree = None
            written = await asyncio.to_thread(mirror.write_back)
            if written:
                log.info("written back from the agent's copy: %s", ", ".join(written))
        finally:
            workspace.tree = None
            await asyncio.to_thread(mirror.close)

    async def _start(
        self,
        agent: AgentDefinition,
        where: Path,
        home: Path,
        access: GatewayAccess,
        workspace: Workspace,
        run: RunContext,
        copy: Path | None = None,
    ) -> Channel:
        """The agent started for ``run``: in the sandbox with the run's egress (its
        network policy) and its ``jarvis code`` toolchain, else on the host."""
        if self.sandboxed:
            from ._sandbox import start_in_sandbox

            return await start_in_sandbox(
                agent,
                where,
                home,
                access,
                workspace,
                self.config,
                functools.partial(self._launch, egress=bool(run.egress)),
                mounts=self.mounts,
                copy=copy,
                egress=run.egress,
                toolchain=(run.sandbox_binds, run.sandbox_env),
            )
        from ._host import start_on_host
        from ._sandbox import write_home

        launch = self._launch(agent, where, home, access)
        write_home(home, launch, for_sandbox=False)

        from ._homes import homes_root

        durable = home.parent == homes_root()
        return await start_on_host(
            launch.argv, launch.env, cwd=workspace.root, home=home, keep_home=durable
        )

    def _launch(
        self,
        agent: AgentDefinition,
        where: Path,
        home: Path,
        access: GatewayAccess,
        *,
        egress: bool = False,
    ) -> Launch:
        """``egress``: the sandboxed run has network (its egress policy): an agent
        without it is not offered tools that need it (:attr:`Setup.offline`)."""
        if agent.prepare is not None:
            return agent.prepare(
                Setup(
                    where,
                    home,
                    access,
                    root=os.geteuid() == 0,
                    sandboxed=self.sandboxed,
                    tools=self.own_tools,
                    egress=egress,
                )
            )
        from ._registry import _base_env

        env = _base_env(home) | {
            "JARVIS_GATEWAY_URL": access.url,
            "JARVIS_GATEWAY_TOKEN": access.token,
            "JARVIS_MODEL": access.model,
        }
        return Launch(agent.command, env | dict(agent.env))


def _preload(module: str) -> asyncio.Task[Any]:
    """``module`` imported in a worker thread; the future is awaited before its first
    use (a run that fails before then drops it: its error is retrieved, not logged)."""
    import importlib

    future = asyncio.create_task(asyncio.to_thread(importlib.import_module, module))
    future.add_done_callback(lambda done: done.cancelled() or done.exception())
    return future


@contextlib.asynccontextmanager
async def _temporary_home() -> AsyncIterator[Path]:
    home = Path(tempfile.mkdtemp(prefix="jarvis-agent-"))
    try:
        yield home
    finally:
        await asyncio.to_thread(shutil.rmtree, home, True)


def _minus(after: Usage, before: Usage) -> Usage:
    return Usage(
        max(after.prompt_tokens - before.prompt_tokens, 0),
        max(after.completion_tokens - before.completion_tokens, 0),
    )
