"""openhands: the OpenHands agent (openhands-sdk, its file editor and terminal) on the
run's model, in its own Python 3.12 venv, in the run's workspace.

The host serves the run's engine through an inference gateway (OpenAI dialect, on
loopback with a per-run token: every request is the run's, budget and cancel
included) and starts ``runners.openhands_runner`` in the venv as a host process in a
session of its own, speaking frames (``FrameSession``): its actions and observations
arrive as tool-call events, its answer as the result frame. The run's MCP servers
(``SERVER.tool`` names) are offered to it as MCP servers it starts itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from .._errors import UsageError
from .._run import RunContext
from ..engines import Engine
from ._base import AgentContext, AgentResult, BaseAgent

__all__ = ["OpenHandsAgent"]

#: The runner's own time limit, a backstop: the run's budgets and cancel stop it first.
_RUNNER_TIMEOUT_S = 3600.0
#: The directory holding jarvisd/ and runners/: the runner imports the frame codec from it.
_SOURCE = str(Path(__file__).resolve().parents[2])


class OpenHandsAgent(BaseAgent):
    """The OpenHands agent (openhands-sdk) on the run's model, editing a workspace."""

    agent_id: ClassVar[str] = "openhands"
    accepts_tools: ClassVar[bool] = True
    #: Runs as a host process of its own (its own runtime), never inside the sandbox.
    host_process: ClassVar[bool] = True

    def __init__(
        self,
        engine: Engine,
        model: str = "",
        *,
        tools: Sequence[Any] = (),
        max_turns: int = 10,
        workspace: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(engine, model, **kwargs)
        self.tools = list(tools)
        self.max_turns = max_turns
        self.workspace = workspace

    def _workspace(self) -> str:
        if not self.workspace:
            raise UsageError(
                "the openhands agent edits a workspace: give one with --option workspace=DIR"
            )
        path = Path(self.workspace).expanduser()
        if not path.is_absolute():
            raise UsageError(f"the openhands workspace must be an absolute path: {self.workspace}")
        if not path.is_dir():
            raise UsageError(f"the openhands workspace is not a directory: {path}")
        return str(path)

    def _mcp_servers(self) -> dict[str, dict[str, Any]]:
        from ..mcp import McpTool

        servers: dict[str, dict[str, Any]] = {}
        for tool in self.tools:
            if isinstance(tool, McpTool):
                config = tool.server.config
                servers[tool.server.name] = {
                    "command": config.command[0],
                    "args": list(config.command[1:]),
                    "env": dict(config.env),
                }
        return servers

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> AgentResult:
        import asyncio

        from ..bridge import FrameSession, runner_result
        from ..executors import ExecRequest
        from ..executors._subprocess import Limits, SubprocessExecutor
        from ..gateway import Gateway
        from ..protocol import Start
        from ._openhands_venv import ensure_venv

        run = self._run_context(run)
        run.cancel.raise_if_cancelled()
        workspace = self._workspace()
        python = await asyncio.to_thread(ensure_venv)
        self._emit_turn_start(run, input)
        argv = (str(python), "-B", "-c",
                f"import sys; sys.path.insert(0, {_SOURCE!r}); "
                "from runners.openhands_runner import entry; entry()")  # fmt: skip
        env = {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else litellm fetches a price list
            "OPENHANDS_SUPPRESS_BANNER": "1",
            "PYTHONUNBUFFERED": "1",
        }
        async with Gateway(self.engine, run, self.model, max_tokens=self.max_tokens) as gateway:
            assert gateway.url is not None
            payload = {
                "task": input,
                "workspace": workspace,
                "model": gateway.model_name,
                "base_url": gateway.url + "/v1",
                "api_key": gateway.token,  # in the start frame, never in argv or env
                "max_iterations": self.max_turns,
                "system_prompt": self.system_prompt or "",
                "mcp_servers": self._mcp_servers(),
            }
            executor = SubprocessExecutor(Limits(memory_bytes=16 * 1024**3, processes=512))
            request = ExecRequest(argv=argv, timeout=_RUNNER_TIMEOUT_S, env=env)
            channel = await executor.open(request)
            session = FrameSession(channel, self.engine, run, model=self.model,
                                   max_tokens=self.max_tokens, name="openhands runner")  # fmt: skip
            outcome = await session.run(Start(task="openhands", payload=payload))
        return self._result(
            runner_result(outcome, run, "openhands", "the openhands runner"), run, workspace
        )

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
