"""FramedAgent: an external agent with a runtime of its own that speaks jarvis's frame
protocol (claude_code: the Claude Agent SDK over ``node_bridge``; openhands: the
OpenHands SDK in its own venv), beside the ACP agents of :mod:`._agent`.

One start sequence for all of them, so it exists once:

1. the agent's runtime is found or installed (:meth:`FramedAgent._runtime`);
2. the run's inference gateway serves the run's engine (every request the run's:
   budget, cancel, events) and the run's tools at its ``/mcp``: on a Unix socket in
   the agent's home in the sandbox (:func:`._sandbox.sandbox_gateway`), on loopback on
   the host;
3. the start payload is pointed at it (:meth:`FramedAgent._wire`);
4. the program starts: in a container of its own from the agent's
   :class:`AgentDefinition` (:func:`._sandbox.start_in_sandbox`, the default), or as a
   host process in a session of its own (``--no-sandbox``, with a warning every run);
5. one frame session carries the run (``jarvisd.bridge.run_runner``): its tool uses
   arrive as tool-call events, its answer as the result frame (:meth:`FramedAgent._result`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from .._errors import UsageError
from .._runcontext import RunContext
from ..agents import AgentContext, AgentResult, BaseAgent
from ..engines import Engine
from ._registry import AgentDefinition, GatewayAccess, Launch
from ._workspace import Workspace

if TYPE_CHECKING:
    from .._config import Config
    from .._events import EventBus
    from ..executors import Channel
    from ..tools import BaseTool, ToolDispatcher

__all__ = ["RUNNER_TIMEOUT_S", "FramedAgent", "Runtime", "workspace_dir"]

log = logging.getLogger(__name__)

#: The program's own time limit, a backstop: the run's budgets and cancel stop it first.
RUNNER_TIMEOUT_S = 3600.0
#: The payload of a start frame: JSON, read by the program across the boundary.
Payload = dict[str, object]


@dataclass(frozen=True, slots=True)
class Runtime:
    """What one run of a framed agent starts from.

    ``where``: the agent's installed tree (the npm tree, the venv), mounted read-only
    at ``AGENT_DIR`` in the sandbox. ``program``: its host program (Node.js, the venv's
    Python). ``engine``: what the gateway serves. ``key``: a vendor key the program is
    handed itself on the host (claude_code's ``[claude_code] api_key_env`` with
    ``--no-sandbox``; never in the sandbox), else None."""

    where: Path
    program: str
    engine: Engine
    key: str | None = None


def workspace_dir(value: str, agent_id: str) -> str:
    """The existing absolute directory an external agent edits, from its
    ``--option workspace=DIR``; a clear error when it is missing or not one."""
    if not value:
        raise UsageError(f"{agent_id} works in a workspace: give one with --option workspace=DIR")
    path = Path(value).expanduser()
    if not path.is_absolute() or not path.is_dir():
        raise UsageError(f"the {agent_id} workspace must be an existing absolute directory: {path}")
    return str(path)


class FramedAgent(BaseAgent):
    """An external agent of the frame protocol; subclasses name its definition and
    fill in the hooks (runtime, payload, wiring, launch, result)."""

    accepts_tools: ClassVar[bool] = True
    #: Runs in a container of its own (its own runtime), not in the runner's sandbox:
    #: ``sandboxed`` is set from the spec (``--no-sandbox`` clears it).
    own_sandbox: ClassVar[bool] = True
    #: What the sandbox mounts and installs (protocol "frames").
    definition: ClassVar[AgentDefinition]
    #: The program's name in errors ("the claude_code bridge").
    program_name: ClassVar[str]
    #: The host process's address-space limit (``--no-sandbox``).
    host_memory: ClassVar[int] = 16 * 1024**3

    def __init__(
        self,
        engine: Engine,
        model: str = "",
        *,
        config: Config | None = None,
        workspace: str = "",
        sandboxed: bool = True,
        tools: Sequence[BaseTool] = (),
        max_turns: int = 10,
        bus: EventBus | None = None,
        temperature: float = 0.7,
        max_tokens: int = 1024,
        system_prompt: str | None = None,
    ) -> None:
        super().__init__(
            engine,
            model,
            bus=bus,
            temperature=temperature,
            max_tokens=max_tokens,
            system_prompt=system_prompt,
        )
        self.config = config
        self.workspace = workspace
        self.sandboxed = sandboxed
        self.tools = list(tools)
        self.max_turns = max_turns

    # The hooks of one agent.

    async def _runtime(self) -> Runtime:
        raise NotImplementedError

    def _payload(self, input: str, workspace: str) -> Payload:
        raise NotImplementedError

    def _wire(
        self,
        payload: Payload,
        runtime: Runtime,
        access: GatewayAccess | None,
        *,
        tools: bool,
        sandboxed: bool,
    ) -> None:
        """Point ``payload`` at the gateway ``access`` names (None: the program has
        its own key and no tools, so no gateway runs); ``tools``: it serves some."""
        raise NotImplementedError

    def _host_program(self, runtime: Runtime) -> tuple[tuple[str, ...], dict[str, str]]:
        """The host process's argv and environment (``--no-sandbox``)."""
        raise NotImplementedError

    def _sandbox_launch(self, runtime: Runtime) -> tuple[Launch, tuple[tuple[str, str], ...]]:
        """How the program starts in the container, and the read-only (host path,
        container path) binds it needs besides its installed tree."""
        raise NotImplementedError

    def _result(self, data: Mapping[str, object], run: RunContext, workspace: str) -> AgentResult:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def _sandbox_home(self) -> AsyncIterator[Path]:
        """The program's home in the sandbox (the gateway's socket lives there): a
        temporary one, removed at the end, unless the agent keeps its own."""
        home = Path(tempfile.mkdtemp(prefix="jarvis-agent-"))
        try:
            yield home
        finally:
            await asyncio.to_thread(shutil.rmtree, home, True)

    # The one start sequence.

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> AgentResult:
        from ..bridge import run_runner
        from ..protocol import Start

        run = self._run_context(run)
        run.cancel.raise_if_cancelled()
        workspace = workspace_dir(self.workspace, self.agent_id)
        runtime = await self._runtime()
        if not self.sandboxed:
            log.warning(
                "agent %s runs on the host with --no-sandbox: NOT isolated (it has "
                "your files and network)",
                self.agent_id,
            )
        self._emit_turn_start(run, input)
        payload = self._payload(input, workspace)
        opened = self._in_sandbox if self.sandboxed else self._on_host
        async with opened(run, runtime, workspace, payload, self._tool_executor()) as channel:
            data = await run_runner(
                channel,
                self.engine,
                run,
                Start(task=self.agent_id, payload=payload),
                name=self.program_name,
                model=self.model,
                max_tokens=self.max_tokens,
            )
        result = self._result(data, run, workspace)
        result.metadata["sandboxed"] = self.sandboxed
        return result

    def _tool_executor(self) -> ToolDispatcher | None:
        """The run's tools, for the gateway's MCP endpoint (None: it has none)."""
        if not self.tools:
            return None
        from ..tools import ToolDispatcher

        return ToolDispatcher(self.tools)

    @contextlib.asynccontextmanager
    async def _on_host(
        self,
        run: RunContext,
        runtime: Runtime,
        workspace: str,
        payload: Payload,
        tools: ToolDispatcher | None,
    ) -> AsyncIterator[Channel]:
        from ..executors import ExecRequest
        from ..executors._subprocess import Limits, SubprocessExecutor
        from ._host import host_gateway

        async with contextlib.AsyncExitStack() as stack:
            access: GatewayAccess | None = None
            if runtime.key is None or tools is not None:  # with a key: for the tools only
                access = await stack.enter_async_context(
                    host_gateway(
                        runtime.engine, run, self.model, max_tokens=self.max_tokens, tools=tools
                    )
                )
            self._wire(payload, runtime, access, tools=tools is not None, sandboxed=False)
            argv, env = self._host_program(runtime)
            executor = SubprocessExecutor(Limits(memory_bytes=self.host_memory, processes=512))
            yield await executor.open(ExecRequest(argv=argv, timeout=RUNNER_TIMEOUT_S, env=env))

    @contextlib.asynccontextmanager
    async def _in_sandbox(
        self,
        run: RunContext,
        runtime: Runtime,
        workspace: str,
        payload: Payload,
        tools: ToolDispatcher | None,
    ) -> AsyncIterator[Channel]:
        from .._config import Config
        from ._sandbox import FORWARD_PORT, sandbox_gateway, start_in_sandbox

        launch, binds = self._sandbox_launch(runtime)
        async with (
            self._sandbox_home() as home,
            sandbox_gateway(
                runtime.engine,
                run,
                self.model,
                home,
                max_tokens=self.max_tokens,
                # One socket per run (a kept home may serve several), gone with it.
                name=f"gateway-{secrets.token_hex(8)}.sock",
                tools=tools,
            ) as access,
        ):
            inside = GatewayAccess(  # the forwarder on the container's loopback, to the socket
                f"http://127.0.0.1:{FORWARD_PORT}", access.token, access.model
            )
            self._wire(payload, runtime, inside, tools=tools is not None, sandboxed=True)
            yield await start_in_sandbox(
                self.definition,
                runtime.where,
                home,
                access,
                Workspace(Path(workspace)),
                self.config or Config(),
                lambda *_: launch,
                extra_binds=binds,
                egress=run.egress,
            )
