"""openhands: the OpenHands agent (openhands-sdk, its file editor and terminal) on the
run's model, in its own Python 3.12 venv, in the run's workspace.

The host serves the run's engine through an inference gateway (OpenAI dialect, a
per-run token: every request is the run's, budget and cancel included), and the run's
tools (built-in ones, MCP servers' ``SERVER.tool``, which the run has started) through
the same gateway's MCP endpoint, on the run's ledger like a built-in agent's; it starts
``runners.openhands_runner`` with the venv's packages, speaking frames
(``FrameSession``): its actions and observations arrive as tool-call events, its answer
as the result frame.

It runs in the sandbox by default, like every external agent
(:func:`jarvisd.external.start_in_sandbox`): the venv and the Python it was made from
mounted read-only (jarvis's frame codec is in every sandbox), the gateway's Unix socket reached through the
container's own loopback, the workspace through the mount allowlist. ``--no-sandbox``
runs it as a host process in a session of its own (gateway on loopback), with a warning
every run. Either way the run's tools run on the host's side of the gateway, like a
built-in agent's: the SDK only calls them.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .._errors import UsageError
from .._run import RunContext
from ..engines import Engine
from ._base import AgentContext, AgentResult, BaseAgent, workspace_dir

if TYPE_CHECKING:
    from .._config import Config
    from ..executors import Channel
    from ..tools import ToolExecutor

__all__ = ["OpenHandsAgent"]

log = logging.getLogger(__name__)

#: The runner's own time limit, a backstop: the run's budgets and cancel stop it first.
_RUNNER_TIMEOUT_S = 3600.0
#: The directory holding jarvisd/ and runners/: the runner imports the frame codec from it.
_SOURCE = str(Path(__file__).resolve().parents[2])
_RUNNER = "from runners.openhands_runner import entry; entry()"
#: What the runner needs whichever side it runs on.
_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else litellm fetches a price list
    "OPENHANDS_SUPPRESS_BANNER": "1",
    "PYTHONUNBUFFERED": "1",
}


class OpenHandsAgent(BaseAgent):
    """The OpenHands agent (openhands-sdk) on the run's model, editing a workspace."""

    agent_id: ClassVar[str] = "openhands"
    accepts_tools: ClassVar[bool] = True
    #: Runs in a container of its own (its own runtime), not in the runner's sandbox:
    #: ``sandboxed`` is set from the spec (``--no-sandbox`` clears it).
    own_sandbox: ClassVar[bool] = True

    def __init__(
        self,
        engine: Engine,
        model: str = "",
        *,
        tools: Sequence[Any] = (),
        max_turns: int = 10,
        workspace: str = "",
        config: Config | None = None,
        sandboxed: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(engine, model, **kwargs)
        self.config = config
        self.sandboxed = sandboxed
        self.tools = list(tools)
        self.max_turns = max_turns
        self.workspace = workspace

    def _tool_executor(self) -> ToolExecutor | None:
        """The run's tools, for the gateway's MCP endpoint (None: it has none)."""
        if not self.tools:
            return None
        from ..tools import ToolExecutor

        return ToolExecutor(self.tools)

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> AgentResult:
        import asyncio

        from ..bridge import run_runner
        from ..protocol import Start
        from ._openhands_venv import ensure_venv

        run = self._run_context(run)
        run.cancel.raise_if_cancelled()
        workspace = workspace_dir(self.workspace, self.agent_id)
        tools = self._tool_executor()
        python = await asyncio.to_thread(ensure_venv)
        if not self.sandboxed:
            log.warning(
                "agent openhands runs on the host with --no-sandbox: NOT isolated (it has "
                "your files and network)"
            )
        self._emit_turn_start(run, input)
        payload = {
            "task": input,
            "workspace": workspace,
            "max_iterations": self.max_turns,
            "system_prompt": self.system_prompt or "",
            # One model request may take as long as the runner may (see the runner).
            "request_timeout": int(_RUNNER_TIMEOUT_S),
        }
        opened = self._in_sandbox if self.sandboxed else self._on_host
        async with opened(run, python, workspace, payload, tools) as channel:
            data = await run_runner(
                channel, self.engine, run, Start(task="openhands", payload=payload),
                name="openhands runner", model=self.model, max_tokens=self.max_tokens,
            )  # fmt: skip
        result = self._result(data, run, workspace)
        result.metadata["sandboxed"] = self.sandboxed
        return result

    @contextlib.asynccontextmanager
    async def _on_host(
        self,
        run: RunContext,
        python: Path,
        workspace: str,
        payload: dict[str, Any],
        tools: ToolExecutor | None,
    ) -> AsyncIterator[Channel]:
        from ..executors import ExecRequest
        from ..executors._subprocess import Limits, SubprocessExecutor
        from ..gateway import MCP_PATH, Gateway

        argv = (str(python), "-B", "-c", f"import sys; sys.path.insert(0, {_SOURCE!r}); {_RUNNER}")
        async with Gateway(
            self.engine, run, self.model, max_tokens=self.max_tokens, tools=tools
        ) as gateway:
            assert gateway.url is not None
            payload.update(
                model=gateway.model_name,
                base_url=gateway.url + "/v1",
                api_key=gateway.token,  # in the start frame, never in argv or env
            )
            if tools is not None:
                payload["tools_url"] = gateway.url + MCP_PATH
            executor = SubprocessExecutor(Limits(memory_bytes=16 * 1024**3, processes=512))
            yield await executor.open(
                ExecRequest(argv=argv, timeout=_RUNNER_TIMEOUT_S, env=dict(_ENV))
            )

    @contextlib.asynccontextmanager
    async def _in_sandbox(
        self,
        run: RunContext,
        python: Path,
        workspace: str,
        payload: dict[str, Any],
        tools: ToolExecutor | None,
    ) -> AsyncIterator[Channel]:
        import asyncio
        import shutil
        import tempfile

        from .._config import Config
        from ..external import AgentDefinition, Workspace
        from ..external import _sandbox as box
        from ..gateway import MCP_PATH

        venv = python.parent.parent
        prefix, launch = _sandbox_launch(python, box.AGENT_DIR, box.HOME_DIR)
        home = Path(tempfile.mkdtemp(prefix="jarvis-agent-"))
        try:
            async with box.sandbox_gateway(
                self.engine, run, self.model, home, max_tokens=self.max_tokens, tools=tools
            ) as access:
                inside = f"http://127.0.0.1:{box.FORWARD_PORT}"  # the forwarder, to the socket
                payload.update(model=access.model, api_key=access.token,
                               base_url=inside + "/v1")  # fmt: skip
                if tools is not None:
                    payload["tools_url"] = inside + MCP_PATH
                venv_agent = AgentDefinition("openhands", "the OpenHands SDK's venv",
                                             packages=(("openhands-sdk", "pinned"),),
                                             needs_node=False)  # fmt: skip
                yield await box.start_in_sandbox(
                    venv_agent, venv, home, access, Workspace(Path(workspace)),
                    self.config or Config(), lambda *_: launch,
                    extra_binds=((str(prefix), "/opt/python"),), egress=run.egress,
                )  # fmt: skip
        finally:
            await asyncio.to_thread(shutil.rmtree, home, True)

    def _result(self, data: Any, run: RunContext, workspace: str) -> AgentResult:
        answer = data.get("answer")
        answer = answer if isinstance(answer, str) else ""
        from ..bridge import wire_tool_results

        results = wire_tool_results(data)
        turns = len(results)
        status = str(data.get("status", ""))[:64]
        metadata: dict[str, Any] = {"workspace": workspace, "status": status, "model": self.model}
        if not answer.strip():
            metadata["error"] = f"openhands ended ({status or 'unknown status'}) without an answer"
            answer = "Error: " + metadata["error"]
        self._emit_turn_end(run, turns=turns, content=answer[:500])
        return AgentResult(answer, results, turns, metadata, run.budget.used)


def _sandbox_launch(python: Path, venv_inside: str, home_inside: str) -> tuple[Path, Any]:
    """The interpreter prefix to mount at /opt/python, and how to start the runner in
    the container. The venv's python is a link to the interpreter it was made from: that
    interpreter's whole prefix (stdlib, libpython) is mounted and started directly, with
    the venv's packages added, so no host path has to exist in the container."""
    from ..external._registry import Launch
    from ..sandbox._policy import CODE_ROOT

    venv = python.parent.parent
    interpreter = Path(os.path.realpath(python))
    site = next(venv.glob("lib/python3.*/site-packages"), None)
    if site is None:
        raise UsageError(
            f"the openhands venv {venv} has no site-packages: reinstall it with "
            "`jarvis agents install openhands`"
        )
    inside_site = f"{venv_inside}/{site.relative_to(venv)}"
    # jarvis's own code is at CODE_ROOT in every sandbox container (the frame codec).
    runner = (f"import site, sys; site.addsitedir({inside_site!r}); "
              f"sys.path.insert(0, {CODE_ROOT!r}); {_RUNNER}")  # fmt: skip
    env = {**_ENV, "HOME": home_inside, "LANG": "C.UTF-8",
           "LD_LIBRARY_PATH": "/opt/python/lib"}  # a shared libpython lives there  # fmt: skip
    argv = ("/opt/python/bin/" + interpreter.name, "-B", "-c", runner)
    return interpreter.parent.parent, Launch(argv, env)
