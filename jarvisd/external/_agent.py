"""ExternalAgent: an ACP coding agent (opencode, codex, claude, gemini, or one from
config) run as a jarvis agent, on the run's model.

One run: the agent is installed if it is not yet (with a message), an inference
gateway serves the run's engine for it (every request through ``RunEngine``: budget,
cancel, events), its per-run HOME and environment are prepared (:mod:`._registry`), it
is started in the sandbox (default) or on the host (``--no-sandbox``, with a warning
every run), and one ACP conversation (:func:`converse`) carries the question. The
answer is the text it streamed; its tool calls are the run's tool results.

A run of an external agent does not checkpoint (its state lives in the agent's
process): after a crash, its task is marked as not resumable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .._errors import AgentNotInstalled, ConfigError, ExternalAgentError, UsageError
from .._messages import Usage
from .._runcontext import RunContext
from ..agents import AgentContext, AgentResult, BaseAgent
from ..engines import Engine
from ._client import AcpClient
from ._install import install, install_dir, installed, node_missing
from ._permissions import Approver, PermissionPolicy
from ._registry import AgentDefinition, GatewayAccess, Launch, Setup
from ._session import McpServer, converse
from ._workspace import Workspace

if TYPE_CHECKING:
    from .._config import Config
    from ..executors import Channel

__all__ = ["NOT_RESUMABLE", "ExternalAgent"]

log = logging.getLogger(__name__)

NOT_RESUMABLE = (
    "an external agent keeps its state in its own process and does not checkpoint, so "
    "its run cannot be resumed (resubmit to run again)"
)
#: The model name agents are given when the run names none (the gateway serves the
#: run's model whatever name an agent asks for).
DEFAULT_MODEL_NAME = "local"


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
        if run.resume is not None:
            raise ExternalAgentError(str(run.resume.get("reason") or NOT_RESUMABLE))
        if run.checkpoint is not None:
            run.checkpoint(
                {"agent": self.definition.name, "resumable": False, "reason": NOT_RESUMABLE}
            )
        workspace = self._workspace()
        agent = self.definition
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
        async with _temporary_home() as home, self._mirror(workspace) as copy:
            if not self.sandboxed:
                from ._terminals import Terminals

                client.terminals = Terminals(home)
            async with self._gateway(run, home) as access:
                channel = await self._start(
                    agent,
                    where,
                    home,
                    access,
                    workspace,
                    copy,
                    egress=run.egress,
                    toolchain=(run.sandbox_binds, run.sandbox_env),
                )
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
                )
        return self._answer(client, stop_reason, workspace, _minus(run.budget.used, used_before))

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
            channel = await self._start(
                agent,
                where,
                home,
                access,
                workspace,
                egress=run.egress,
                toolchain=(run.sandbox_binds, run.sandbox_env),
            )
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
    async def _gateway(self, run: RunContext, home: Path) -> AsyncIterator[GatewayAccess]:
        from ._host import host_gateway
        from ._sandbox import sandbox_gateway

        # The model name an agent is given when the run names none.
        model = self.model or DEFAULT_MODEL_NAME
        opened = (
            sandbox_gateway(
                self.engine,
                run,
                self.model,
                home,
                max_tokens=self.max_tokens,
                default_model=model,
                temperature=self.temperature,
                max_turns=self.max_turns,
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
        copy: Path | None = None,
        *,
        egress: str = "",
        toolchain: tuple[Sequence[tuple[str, str, bool]], Mapping[str, str]] = ((), {}),
    ) -> Channel:
        if self.sandboxed:
            from ._sandbox import start_in_sandbox

            return await start_in_sandbox(
                agent,
                where,
                home,
                access,
                workspace,
                self.config,
                self._launch,
                mounts=self.mounts,
                copy=copy,
                egress=egress,
                toolchain=toolchain,
            )
        from ._host import start_on_host
        from ._sandbox import write_home

        launch = self._launch(agent, where, home, access)
        write_home(home, launch, for_sandbox=False)

        return await start_on_host(launch.argv, launch.env, cwd=workspace.root, home=home)

    def _launch(
        self, agent: AgentDefinition, where: Path, home: Path, access: GatewayAccess
    ) -> Launch:
        if agent.prepare is not None:
            return agent.prepare(
                Setup(
                    where,
                    home,
                    access,
                    root=os.geteuid() == 0,
                    sandboxed=self.sandboxed,
                    tools=self.own_tools,
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
