"""claude_code: Claude Code (the Claude Agent SDK, driven by ``node_bridge/claude_code.mjs``)
on the run's model by default.

The host serves the run's engine through an inference gateway (Anthropic Messages
dialect, loopback, a per-run token: every request is the run's, budget and cancel
included) and points the SDK at it with ``ANTHROPIC_BASE_URL`` and the token as the
key. A real Anthropic key is used only when the config names the environment variable
holding it (``[claude_code] api_key_env``, or ``--engine NAME`` naming a
``[credentials.NAME]``): never taken from the environment silently, and ``jarvis
agents list`` says which mode applies. In the sandbox the key stays on the host: the
gateway forwards the SDK's requests to Anthropic as they are and adds it there
(``jarvisd.gateway._upstream``), so the container sees only the run's token.

The bridge runs in the sandbox by default, like every external agent
(:func:`jarvisd.external.start_in_sandbox`: no network, the SDK's npm tree, the bridge
scripts and Node.js mounted read-only, the gateway's Unix socket reached through the
container's own loopback, the workspace through the mount allowlist); ``--no-sandbox``
runs it as a host process in a session of its own, with a warning every run. Either way
it starts with a minimal environment and speaks frames (``FrameSession``); its tool
uses arrive as tool-call events, and the SDK's session id comes back in the result's
metadata, for ``--option resume=ID`` (sessions live in jarvis's data dir, one home for
sandboxed runs and one for host runs).

The run's tools (``--tools``: built-in ones, MCP servers' ``SERVER.tool``, which the
run has started) are served by the same gateway's MCP endpoint, which the SDK takes as
one HTTP MCP server, ``jarvis`` (its tools are ``mcp__jarvis__NAME`` to the model, and
allowed without asking); every call runs on the host, on the run's ledger. With a real
Anthropic key the gateway still runs, for the tools only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .._errors import UsageError
from .._run import RunContext
from ..engines import Engine
from ._base import AgentContext, AgentResult, BaseAgent, workspace_dir

if TYPE_CHECKING:
    from .._config import Config
    from ..executors import Channel
    from ..tools import BaseTool, ToolExecutor

__all__ = ["ClaudeCodeAgent", "key_mode"]

log = logging.getLogger(__name__)

_RUNNER_TIMEOUT_S = 3600.0
#: Where ``[claude_code] api_key_env`` sends the SDK's requests from a sandboxed run.
ANTHROPIC_API = "https://api.anthropic.com"
#: What the SDK's CLI must not do on its own: phone home, update itself, report errors.
_QUIET = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
}


def _home(sandboxed: bool = False) -> Path:
    """The SDK's HOME (its sessions, for resume). The sandbox's is its own, owned by the
    sandbox user when jarvis runs as root: a contained run never writes the host run's."""
    from .._paths import paths

    home = paths().data / "agents" / ("claude_code-sandbox" if sandboxed else "claude_code")
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    if sandboxed and os.geteuid() == 0:
        from ..sandbox._policy import SANDBOX_GID, SANDBOX_UID

        os.lchown(home, SANDBOX_UID, SANDBOX_GID)
    return home


def key_mode(config: Config) -> str:
    """Which model claude_code uses under ``config``, in words."""
    for credential_name, credential in config.credentials.items():
        if "claude_code" in credential.agents:
            return (
                f"{credential.upstream}, through credential {credential_name!r} (the key in "
                f"${credential.env}, held on the host; --engine another to change)"
            )
    name = config.claude_code.api_key_env
    if name:
        return (
            f"the Anthropic API, with the key in ${name} (named in the config; held on the "
            "host in the sandbox)"
        )
    return "the run's local model, through the inference gateway (no Anthropic key)"


def _forwards(engine: Engine) -> bool:
    from ..engines import CredentialEngine

    return isinstance(engine, CredentialEngine)


class ClaudeCodeAgent(BaseAgent):
    """Claude Code (the Claude Agent SDK over node_bridge) on the run's model."""

    agent_id: ClassVar[str] = "claude_code"
    accepts_tools: ClassVar[bool] = True
    #: Runs in a container of its own (its own runtime), not in the runner's sandbox:
    #: ``sandboxed`` is set from the spec (``--no-sandbox`` clears it).
    own_sandbox: ClassVar[bool] = True

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
        turns: int | None = None,
        resume: str = "",
        sandboxed: bool = True,
        tools: Sequence[BaseTool] = (),
        max_turns: int = 10,
        **kwargs: Any,
    ) -> None:
        super().__init__(engine, model, **kwargs)
        self.sandboxed = sandboxed
        self.tools = list(tools)
        self.config = config
        self.workspace = workspace
        self.allowed_tools = [t.strip() for t in allowed_tools.split(",") if t.strip()]
        self.permission_mode = permission_mode
        self.turns = max_turns if turns is None else turns  # --option turns over --max-turns
        self.resume = resume

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

        from ..bridge import run_runner
        from ..protocol import Start
        from ._claude_code_install import ensure_sdk, find_node

        run = self._run_context(run)
        run.cancel.raise_if_cancelled()
        workspace = workspace_dir(self.workspace, self.agent_id)
        node = await asyncio.to_thread(find_node)
        sdk_dir = await asyncio.to_thread(ensure_sdk)
        api_key = self._api_key()
        engine = self._gateway_engine()
        if api_key is not None and self.sandboxed:
            # Never into the container: the gateway holds it and forwards to Anthropic.
            engine, api_key = self._anthropic_credential(), None
        if not self.sandboxed:
            log.warning(
                "agent claude_code runs on the host with --no-sandbox: NOT isolated (it has "
                "your files and network)"
            )
        self._emit_turn_start(run, input)
        payload = {
            "prompt": input,
            "cwd": workspace,
            "allowed_tools": self.allowed_tools,
            "permission_mode": self.permission_mode,
            "max_turns": self.turns,
            "system_prompt": self.system_prompt or "",
            "resume": self.resume,
        }
        tools = self._tool_executor()
        opened = self._in_sandbox if self.sandboxed else self._on_host
        async with opened(
            run, workspace, node, sdk_dir, api_key, payload, tools, engine
        ) as channel:
            data = await run_runner(
                channel, self.engine, run, Start(task="claude_code", payload=payload),
                name="claude_code bridge", model=self.model, max_tokens=self.max_tokens,
            )  # fmt: skip
        result = self._result(data, run, workspace)
        result.metadata["sandboxed"] = self.sandboxed
        return result

    def _anthropic_credential(self) -> Engine:
        """``[claude_code] api_key_env`` as a host-held credential for Anthropic's API."""
        from .._config import CredentialConfig
        from ..engines import CredentialEngine

        name = self.config.claude_code.api_key_env if self.config is not None else ""
        credential = CredentialConfig(env=name, upstream=ANTHROPIC_API, dialect="anthropic")
        return CredentialEngine("claude_code", credential, self.model)

    def _gateway_engine(self) -> Engine:
        """What the gateway serves: the run's engine; a credential only for Anthropic."""
        from .._config import credential_dialect
        from ..engines import CredentialEngine

        engine = self.engine
        if isinstance(engine, CredentialEngine):
            dialect = credential_dialect(engine.credential)
            if dialect != "anthropic":
                raise UsageError(
                    f"claude_code speaks Anthropic Messages; credential "
                    f"{engine.credential_name!r} serves the {dialect} API"
                )
        return engine

    def _tool_executor(self) -> ToolExecutor | None:
        """The run's tools, for the gateway's MCP endpoint (None: it has none)."""
        if not self.tools:
            return None
        from ..tools import ToolExecutor

        return ToolExecutor(self.tools)

    @contextlib.asynccontextmanager
    async def _on_host(
        self, run: RunContext, workspace: str, node: str, sdk_dir: Path, api_key: str | None,
        payload: dict[str, Any], tools: ToolExecutor | None, engine: Engine,
    ) -> AsyncIterator[Channel]:  # fmt: skip
        from ..executors import ExecRequest
        from ..executors._subprocess import Limits, SubprocessExecutor
        from ..gateway import MCP_PATH, Gateway
        from ._claude_code_install import bridge_dir

        async with contextlib.AsyncExitStack() as stack:
            # The SDK's environment, from nothing: no variable of ours reaches it. Its
            # HOME is jarvis's own (sessions live there, for resume), never the user's.
            env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(_home()), **_QUIET}
            if os.geteuid() == 0:
                env["IS_SANDBOX"] = "1"  # Claude Code refuses to run as root otherwise
            payload["model"] = self.model
            if api_key is None or tools is not None:  # with a real key: for the tools only
                gateway = await stack.enter_async_context(
                    Gateway(engine, run, self.model, max_tokens=self.max_tokens, tools=tools)
                )
                assert gateway.url is not None
                if tools is not None:
                    payload.update(tools_url=gateway.url + MCP_PATH, tools_token=gateway.token)
                if api_key is None:
                    env.update(ANTHROPIC_BASE_URL=gateway.url, ANTHROPIC_API_KEY=gateway.token)
                    payload["model"] = (
                        engine.default_model() if _forwards(engine) else gateway.model_name
                    )
            if api_key is not None:
                env["ANTHROPIC_API_KEY"] = api_key
            payload["env"] = env  # the key travels in the start frame only
            argv = (node, str(bridge_dir() / "claude_code.mjs"))
            request = ExecRequest(
                argv=argv, timeout=_RUNNER_TIMEOUT_S, env={"JARVIS_CLAUDE_SDK_DIR": str(sdk_dir)}
            )
            # The SDK's CLI reserves far more address space than it uses: no RLIMIT_AS.
            executor = SubprocessExecutor(Limits(memory_bytes=1 << 40, processes=512))
            yield await executor.open(request)

    @contextlib.asynccontextmanager
    async def _in_sandbox(
        self, run: RunContext, workspace: str, node: str, sdk_dir: Path, api_key: str | None,
        payload: dict[str, Any], tools: ToolExecutor | None, engine: Engine,
    ) -> AsyncIterator[Channel]:  # fmt: skip
        from .._config import Config
        from ..external import AgentDefinition, Workspace
        from ..external import _sandbox as box
        from ..external._registry import Launch
        from ..gateway import MCP_PATH
        from ._claude_code_install import bridge_dir

        home = _home(sandboxed=True)
        # One socket per run in the sandbox's home (mounted at HOME_DIR), gone with it.
        async with box.sandbox_gateway(
            engine, run, self.model, home, max_tokens=self.max_tokens,
            name=f"gateway-{secrets.token_hex(8)}.sock", tools=tools,
        ) as access:  # fmt: skip
            inside = f"http://127.0.0.1:{box.FORWARD_PORT}"  # the forwarder, to the socket
            # Through a credential: the model the run names, else the SDK's own default.
            payload["model"] = engine.default_model() if _forwards(engine) else access.model
            payload["env"] = {
                "PATH": box.SANDBOX_PATH, "HOME": box.HOME_DIR, **_QUIET,
                "ANTHROPIC_BASE_URL": inside, "ANTHROPIC_API_KEY": access.token,
            }  # fmt: skip
            if tools is not None:
                payload.update(tools_url=inside + MCP_PATH, tools_token=access.token)
            bridge = "/opt/bridge"
            launch = Launch(
                (box.NODE_PATH, f"{bridge}/claude_code.mjs"),
                {"HOME": box.HOME_DIR, "JARVIS_CLAUDE_SDK_DIR": box.AGENT_DIR, "LANG": "C.UTF-8"},
            )
            # The SDK's npm tree from the cache (node_bridge/package.json pins it).
            sdk = AgentDefinition("claude_code", "Claude Code over node_bridge",
                                  packages=(("@anthropic-ai/claude-agent-sdk", "pinned"),))  # fmt: skip
            yield await box.start_in_sandbox(
                sdk, sdk_dir, home, access,
                Workspace(Path(workspace)), self.config or Config(), lambda *_: launch,
                extra_binds=((str(bridge_dir()), bridge),), egress=run.egress,
            )  # fmt: skip

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
