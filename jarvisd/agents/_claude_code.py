"""claude_code: Claude Code (the Claude Agent SDK, driven by ``node_bridge/claude_code.mjs``)
on the run's model by default.

The host serves the run's engine through an inference gateway (Anthropic Messages
dialect, loopback, a per-run token: every request is the run's, budget and cancel
included) and points the SDK at it with ``ANTHROPIC_BASE_URL`` and the token as the
key. A real Anthropic key is used only when the config names the environment variable
holding it (``[claude_code] api_key_env``): never taken from the environment silently,
and ``jarvis agents list`` says which mode applies. The bridge is a host process in a
session of its own with a minimal environment; it speaks frames (``FrameSession``), its
tool uses arrive as tool-call events, and the SDK's session id comes back in the
result's metadata, for ``--option resume=ID``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .._errors import UsageError
from .._run import RunContext
from ..engines import Engine
from ._base import AgentContext, AgentResult, BaseAgent

if TYPE_CHECKING:
    from .._config import Config

__all__ = ["ClaudeCodeAgent", "key_mode"]

_RUNNER_TIMEOUT_S = 3600.0
#: What the SDK's CLI must not do on its own: phone home, update itself, report errors.
_QUIET = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
}


def _home() -> Path:
    from .._paths import paths

    home = paths().data / "agents" / "claude_code"
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    return home


def key_mode(config: Config) -> str:
    """Which model claude_code uses under ``config``, in words."""
    name = config.claude_code.api_key_env
    if name:
        return f"the Anthropic API, with the key in ${name} (named in the config)"
    return "the run's local model, through the inference gateway (no Anthropic key)"


class ClaudeCodeAgent(BaseAgent):
    """Claude Code (the Claude Agent SDK over node_bridge) on the run's model."""

    agent_id: ClassVar[str] = "claude_code"
    accepts_tools: ClassVar[bool] = False
    #: Runs as a host process of its own (its own runtime), never inside the sandbox.
    host_process: ClassVar[bool] = True
    wants_config: ClassVar[bool] = True

    def __init__(
        self,
        engine: Engine,
        model: str = "",
        *,
        config: Config | None = None,
        workspace: str = "",
        allowed_tools: str = "",
        permission_mode: Literal["default", "acceptEdits", "bypassPermissions", "plan"] = (
            "acceptEdits"
        ),
        turns: int = 10,
        resume: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(engine, model, **kwargs)
        self.config = config
        self.workspace = workspace
        self.allowed_tools = [t.strip() for t in allowed_tools.split(",") if t.strip()]
        self.permission_mode = permission_mode
        self.turns = turns
        self.resume = resume

    def _workspace(self) -> str:
        if not self.workspace:
            raise UsageError(
                "claude_code works in a workspace: give one with --option workspace=DIR"
            )
        path = Path(self.workspace).expanduser()
        if not path.is_absolute() or not path.is_dir():
            raise UsageError(
                f"the claude_code workspace must be an existing absolute directory: {path}"
            )
        return str(path)

    def _api_key(self) -> str | None:
        """The real Anthropic key when the config names its variable, else None."""
        name = self.config.claude_code.api_key_env if self.config is not None else ""
        if not name:
            return None
        key = os.environ.get(name, "")
        if not key:
            raise UsageError(f"[claude_code] api_key_env names ${name}, which is not set")
        return key

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> AgentResult:
        import asyncio
        import contextlib

        from ..bridge import FrameSession, runner_result
        from ..executors import ExecRequest
        from ..executors._subprocess import Limits, SubprocessExecutor
        from ..gateway import Gateway
        from ..protocol import Start
        from ._claude_code_install import bridge_dir, ensure_sdk, find_node

        run = self._run_context(run)
        run.cancel.raise_if_cancelled()
        workspace = self._workspace()
        node = await asyncio.to_thread(find_node)
        sdk_dir = await asyncio.to_thread(ensure_sdk)
        api_key = self._api_key()
        self._emit_turn_start(run, input)
        async with contextlib.AsyncExitStack() as stack:
            # The SDK's environment, from nothing: no variable of ours reaches it. Its
            # HOME is jarvis's own (sessions live there, for resume), never the user's.
            home = _home()
            env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), **_QUIET}
            if os.geteuid() == 0:
                env["IS_SANDBOX"] = "1"  # Claude Code refuses to run as root otherwise
            model = self.model
            if api_key is None:
                gateway = await stack.enter_async_context(
                    Gateway(self.engine, run, self.model, max_tokens=self.max_tokens)
                )
                assert gateway.url is not None
                env.update(ANTHROPIC_BASE_URL=gateway.url, ANTHROPIC_API_KEY=gateway.token)
                model = gateway.model_name
            else:
                env["ANTHROPIC_API_KEY"] = api_key
            payload = {
                "prompt": input,
                "cwd": workspace,
                "allowed_tools": self.allowed_tools,
                "permission_mode": self.permission_mode,
                "max_turns": self.turns,
                "system_prompt": self.system_prompt or "",
                "resume": self.resume,
                "model": model,
                "env": env,  # the key travels in the start frame only
            }
            argv = (node, str(bridge_dir() / "claude_code.mjs"))
            request = ExecRequest(
                argv=argv, timeout=_RUNNER_TIMEOUT_S, env={"JARVIS_CLAUDE_SDK_DIR": str(sdk_dir)}
            )
            # The SDK's CLI reserves far more address space than it uses: no RLIMIT_AS.
            executor = SubprocessExecutor(Limits(memory_bytes=1 << 40, processes=512))
            channel = await executor.open(request)
            session = FrameSession(channel, self.engine, run, model=self.model,
                                   max_tokens=self.max_tokens, name="claude_code bridge")  # fmt: skip
            outcome = await session.run(Start(task="claude_code", payload=payload))
        return self._result(
            runner_result(outcome, run, "claude_code", "the claude_code bridge"), run, workspace
        )

    def _result(self, data: Any, run: RunContext, workspace: str) -> AgentResult:
        answer = data.get("answer")
        answer = answer if isinstance(answer, str) else ""
        from ..bridge import wire_tool_results

        results = wire_tool_results(data)
        turns = data.get("turns")
        turns = turns if isinstance(turns, int) and not isinstance(turns, bool) else len(results)
        session_id = str(data.get("session_id", ""))[:200]
        subtype = str(data.get("subtype", ""))[:64]
        metadata: dict[str, Any] = {
            "workspace": workspace,
            "session_id": session_id,
            "subtype": subtype,
            "model": self.model,
        }
        if data.get("is_error") or not answer.strip():
            metadata["error"] = f"claude_code ended ({subtype or 'unknown'}) without an answer"
            if subtype == "error_max_turns":
                metadata["max_turns_exceeded"] = True
            answer = answer or "Error: " + metadata["error"]
        self._emit_turn_end(run, turns=max(turns, 0), content=answer[:500])
        return AgentResult(answer, results, max(turns, 0), metadata, run.budget.used)
