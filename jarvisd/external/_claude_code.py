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
(:class:`jarvisd.external.FramedAgent`, its start sequence;
:func:`jarvisd.external._sandbox.start_in_sandbox`: no network, the SDK's npm tree, the bridge
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

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .._errors import UsageError
from .._runcontext import RunContext
from ..agents import AgentResult
from ..engines import Engine
from ._framed import FramedAgent, Payload, Runtime
from ._registry import AgentDefinition, GatewayAccess, Launch

if TYPE_CHECKING:
    from .._config import Config

__all__ = ["ClaudeCodeAgent", "key_mode"]

log = logging.getLogger(__name__)

#: Where ``[claude_code] api_key_env`` sends the SDK's requests from a sandboxed run.
ANTHROPIC_API = "https://api.anthropic.com"
#: What the SDK's CLI must not do on its own: phone home, update itself, report errors.
_QUIET = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
}
#: Where the bridge scripts are mounted in the sandbox.
_BRIDGE_INSIDE = "/opt/bridge"


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


class ClaudeCodeAgent(FramedAgent):
    """Claude Code (the Claude Agent SDK over node_bridge) on the run's model."""

    agent_id: ClassVar[str] = "claude_code"
    #: The SDK's npm tree from the cache (node_bridge/package.json pins it).
    definition: ClassVar[AgentDefinition] = AgentDefinition(
        "claude_code",
        "Claude Code over node_bridge",
        protocol="frames",
        packages=(("@anthropic-ai/claude-agent-sdk", "pinned"),),
    )
    program_name: ClassVar[str] = "claude_code bridge"
    #: The SDK's CLI reserves far more address space than it uses: no RLIMIT_AS.
    host_memory: ClassVar[int] = 1 << 40

    def __init__(
        self,
        engine: Engine,
        model: str = "",
        *,
        workspace: str = "",
        allowed_tools: str = "",
        permission_mode: Literal["default", "acceptEdits", "bypassPermissions", "plan"] = (
            "acceptEdits"
        ),
        turns: int | None = None,
        resume: str = "",
        max_turns: int = 10,
        **kwargs: Any,
    ) -> None:
        super().__init__(engine, model, workspace=workspace, max_turns=max_turns, **kwargs)
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

    async def _runtime(self) -> Runtime:
        from . import _claude_code_install as install

        node = await asyncio.to_thread(install.find_node)
        sdk_dir = await asyncio.to_thread(install.ensure_sdk)
        api_key = self._api_key()
        engine = self._gateway_engine()
        if api_key is not None and self.sandboxed:
            # Never into the container: the gateway holds it and forwards to Anthropic.
            engine, api_key = self._anthropic_credential(), None
        return Runtime(sdk_dir, node, engine, api_key)

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

    def _payload(self, input: str, workspace: str) -> Payload:
        return {
            "prompt": input,
            "cwd": workspace,
            "allowed_tools": self.allowed_tools,
            "permission_mode": self.permission_mode,
            "max_turns": self.turns,
            "system_prompt": self.system_prompt or "",
            "resume": self.resume,
        }

    def _wire(
        self,
        payload: Payload,
        runtime: Runtime,
        access: GatewayAccess | None,
        *,
        tools: bool,
        sandboxed: bool,
    ) -> None:
        from ..gateway import MCP_PATH

        # The SDK's environment, from nothing: no variable of ours reaches it. Its HOME
        # is jarvis's own (sessions live there, for resume), never the user's.
        if sandboxed:
            from ._sandbox import HOME_DIR, SANDBOX_PATH

            env = {"PATH": SANDBOX_PATH, "HOME": HOME_DIR, **_QUIET}
        else:
            env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(_home()), **_QUIET}
            if os.geteuid() == 0:
                env["IS_SANDBOX"] = "1"  # Claude Code refuses to run as root otherwise
        payload["model"] = self.model
        if access is not None:
            if tools:
                payload.update(tools_url=access.url + MCP_PATH, tools_token=access.token)
            if runtime.key is None:
                env.update(ANTHROPIC_BASE_URL=access.url, ANTHROPIC_API_KEY=access.token)
                # Through a credential: the model the run names, else the SDK's own default.
                forwards = _forwards(runtime.engine)
                payload["model"] = runtime.engine.default_model() if forwards else access.model
        if runtime.key is not None:
            env["ANTHROPIC_API_KEY"] = runtime.key
        payload["env"] = env  # the key travels in the start frame only

    def _host_program(self, runtime: Runtime) -> tuple[tuple[str, ...], dict[str, str]]:
        from ._claude_code_install import bridge_dir

        argv = (runtime.program, str(bridge_dir() / "claude_code.mjs"))
        return argv, {"JARVIS_CLAUDE_SDK_DIR": str(runtime.where)}

    def _sandbox_launch(self, runtime: Runtime) -> tuple[Launch, tuple[tuple[str, str], ...]]:
        from ._claude_code_install import bridge_dir
        from ._sandbox import AGENT_DIR, HOME_DIR, NODE_PATH

        launch = Launch(
            (NODE_PATH, f"{_BRIDGE_INSIDE}/claude_code.mjs"),
            {"HOME": HOME_DIR, "JARVIS_CLAUDE_SDK_DIR": AGENT_DIR, "LANG": "C.UTF-8"},
        )
        return launch, ((str(bridge_dir()), _BRIDGE_INSIDE),)

    @contextlib.asynccontextmanager
    async def _sandbox_home(self) -> AsyncIterator[Path]:
        yield _home(sandboxed=True)  # kept: its sessions, for resume

    def _result(self, data: Mapping[str, object], run: RunContext, workspace: str) -> AgentResult:
        from ..bridge import wire_tool_results

        answer = data.get("answer")
        answer = answer if isinstance(answer, str) else ""
        results = wire_tool_results(data)
        turns = data.get("turns")
        turns = turns if isinstance(turns, int) and not isinstance(turns, bool) else len(results)
        session_id = str(data.get("session_id", ""))[:200]
        subtype = str(data.get("subtype", ""))[:64]
        metadata: dict[str, object] = {
            "workspace": workspace,
            "session_id": session_id,
            "subtype": subtype,
            "model": self.model,
        }
        if data.get("is_error") or not answer.strip():
            error = f"claude_code ended ({subtype or 'unknown'}) without an answer"
            metadata["error"] = error
            if subtype == "error_max_turns":
                metadata["max_turns_exceeded"] = True
            answer = answer or "Error: " + error
        self._emit_turn_end(run, turns=max(turns, 0), content=answer[:500])
        return AgentResult(answer, results, max(turns, 0), metadata, run.budget.used)
