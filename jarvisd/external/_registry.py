"""External agents: the built-in four (opencode, codex, claude, gemini) and those a
config adds (``[agents.external.NAME]``), with what each needs to run offline on the
run's model.

A built-in agent is pinned npm packages (``npm/NAME/package.json`` and its lock file,
installed with ``npm ci`` by :mod:`._install`), the program to start from that tree, and
a :data:`Prepare` function that writes its per-run HOME (config files) and environment
so it talks only to the run's inference gateway: its vendor's offline switches on, its
telemetry off, the gateway's per-run token as its only API key. The user's real API
keys never reach it: the environment is built from nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .._errors import UsageError

if TYPE_CHECKING:
    from ..gateway import PeerBinding

__all__ = [
    "BUILTIN",
    "AgentDefinition",
    "GatewayAccess",
    "Launch",
    "Setup",
    "definition",
    "external_names",
    "opencode_prompt",
]


@dataclass(frozen=True, slots=True)
class GatewayAccess:
    """Where the agent reaches the run's model: ``url`` has no trailing slash and no
    path (``http://127.0.0.1:PORT``); ``token`` is the gateway's per-run secret."""

    url: str
    token: str
    model: str
    #: The gateway's binding to the run's container (sandboxed, jarvis as root): set
    #: to the container once it runs, so a token read from /proc is no use elsewhere.
    peers: PeerBinding | None = None


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start the agent: argv, its whole environment, and files to write under
    its HOME (relative name -> text)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    files: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Setup:
    """What one run of an agent is prepared from."""

    install: Path
    home: Path
    gateway: GatewayAccess
    #: Whether it runs as root (some agents refuse to outside a sandbox they know).
    root: bool = False
    #: Whether it runs in jarvis's sandbox (rather than on the host, ``--no-sandbox``).
    sandboxed: bool = True
    #: The agent's own tools it may use (``--tools``); empty: all of them.
    tools: tuple[str, ...] = ()
    #: Whether a sandboxed run has network, through its egress policy (``--egress``,
    #: ``[network]``: jarvisd.sandbox._egress); without it the container has none.
    egress: bool = False

    @property
    def offline(self) -> bool:
        """Whether the agent has no network: in jarvis's sandbox without egress (on
        the host, ``--no-sandbox``, it has the host's)."""
        return self.sandboxed and not self.egress


#: How to start the agent for one run.
Prepare = Callable[[Setup], Launch]


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    name: str
    description: str
    protocol: Literal["acp", "frames"] = "acp"
    #: npm packages (name, exact version) of a built-in agent; empty for config agents.
    packages: tuple[tuple[str, str], ...] = ()
    #: The program inside the install dir that must exist once installed.
    binary: str = ""
    #: Whether it needs ``node`` on PATH (a Node.js program, not a native binary).
    needs_node: bool = True
    #: The HTTP dialect it speaks to the gateway (documentation and tests).
    dialect: str = ""
    prepare: Prepare | None = None
    #: Whether jarvis can hold it to some of its own tools (``--tools read,grep``).
    limits_tools: bool = False
    #: The context window its first prompt needs (its own system prompt and tools:
    #: 7,341 tokens for opencode, 8,397 for codex), with room for the work: the run's
    #: engine is asked for this many before the agent starts (``reserve_context``).
    context: int = 0
    #: A config agent's command (argv) and extra environment.
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def builtin(self) -> bool:
        return bool(self.packages)


def _base_env(home: Path) -> dict[str, str]:
    """What every agent gets: a PATH, a locale, its own HOME and temp dir; nothing from
    the caller's environment that could hold a secret."""
    return {
        "PATH": os.environ.get("PATH") or os.defpath,
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        "LANG": "C.UTF-8",
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "NO_UPDATE_NOTIFIER": "1",
        "DO_NOT_TRACK": "1",
    }


def _opencode(setup: Setup) -> Launch:
    # A custom OpenAI-compatible provider: without a model set, opencode silently
    # falls back to a cloud model and hangs offline. Its own permission prompts are
    # all "ask", so jarvis's policy is what decides (session/request_permission).
    gw = setup.gateway
    permission = {"edit": "ask", "bash": "ask", "webfetch": "ask"}
    if setup.tools:
        # A denied tool is taken out of what the model is shown, so a small model
        # also gets a shorter prompt (the ten tools' schemas are ~5,500 tokens).
        permission = {"*": "deny"} | dict.fromkeys(setup.tools, "ask")
    if setup.offline:
        # With no network a fetch can only fail: denied, even when --tools names it,
        # so the model is not offered it (nor its ~330-token schema).
        permission |= dict.fromkeys(_OPENCODE_WEB_TOOLS, "deny")
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "jarvis": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "jarvis",
                "options": {"baseURL": f"{gw.url}/v1", "apiKey": gw.token},
                "models": {gw.model: {"name": gw.model, "tool_call": True}},
            }
        },
        "model": f"jarvis/{gw.model}",
        "small_model": f"jarvis/{gw.model}",
        "autoupdate": False,
        "share": "disabled",
        "permission": permission,
    }
    env = _base_env(setup.home) | {
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    }
    return Launch(
        (str(setup.install / "node_modules/.bin/opencode"), "acp"), env, _OPENCODE_DEPS_DONE
    )


def opencode_prompt(model: str) -> str:
    """Which of its system prompts opencode (1.18.33) gives a model, by the model's
    name: the one launch input a started opencode reads from the run (its started
    agents are configured with a placeholder name, ``_agentpool.SLOT_MODEL``)."""
    lower = model.lower()
    for family, marks in _OPENCODE_PROMPTS:
        if any(mark in (lower if family in ("trinity", "kimi") else model) for mark in marks):
            return family
    return "default"


#: opencode's prompt families, in the order it tests the model's name (``includes``).
_OPENCODE_PROMPTS = (
    ("muse", ("muse",)),
    ("gpt-4", ("gpt-4", "o1", "o3")),
    ("gpt", ("gpt",)),
    ("gemini", ("gemini-",)),
    ("claude", ("claude",)),
    ("trinity", ("trinity",)),
    ("kimi", ("kimi",)),
)


#: opencode's tools that reach the web (``websearch`` and ``codesearch`` are offered
#: only with its own provider or ``OPENCODE_ENABLE_EXA``; denied all the same).
_OPENCODE_WEB_TOOLS = ("webfetch", "websearch", "codesearch")


#: At its start opencode npm-installs ``@opencode-ai/plugin`` (the types of user plugins,
#: none of which it is given) into its config dir, unless a ``node_modules`` there sits
#: beside a lock file naming it. On the host that is a trip to the npm registry, seconds
#: before the first request; in the sandbox it fails, after loading the installer. The
#: marker says it is done.
_OPENCODE_DEPS_DONE = {
    ".config/opencode/package-lock.json": json.dumps(
        {"lockfileVersion": 3, "packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}
    ),
    ".config/opencode/node_modules/.jarvis": "",
}


#: codex with no network. Under ``danger-full-access`` its permissions text (~800
#: tokens, on escalating out of a sandbox of its own) says "Network access is
#: enabled": false in a container without egress, and the sandbox modes whose text
#: says otherwise start bubblewrap, which cannot run in jarvis's container. So that
#: text is left out and one line says what is true. Its hosted web search and its
#: bundled skills (image generation, OpenAI docs, installing skills from GitHub,
#: writing codex plugins: ~1,100 tokens of instructions) need the network.
#: Top-level keys, before the first table; the table after the last.
_CODEX_OFFLINE_KEYS = (
    "include_permissions_instructions = false\n"
    'developer_instructions = "You run in a sandbox with no network access: commands '
    "cannot reach the internet or install packages from it. Work with the files and "
    'tools at hand."\n'
    'web_search = "disabled"\n'
)
_CODEX_OFFLINE_TABLES = "[skills.bundled]\nenabled = false\n"


def _codex(setup: Setup) -> Launch:
    # codex speaks only the Responses API. The ACP binary is started directly: its
    # Node wrapper leaves it running when killed.
    gw = setup.gateway
    codex_home = setup.home / ".codex"
    config = (
        f'model = "{gw.model}"\n'
        'model_provider = "jarvis"\n'
        "[model_providers.jarvis]\n"
        'name = "jarvis"\n'
        f'base_url = "{gw.url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "JARVIS_GATEWAY_TOKEN"\n'
    )
    if setup.sandboxed:
        # jarvis's container is the sandbox; codex's own (bubblewrap) cannot start in it.
        config = 'sandbox_mode = "danger-full-access"\n' + config
    if setup.offline:
        config = _CODEX_OFFLINE_KEYS + config + _CODEX_OFFLINE_TABLES
    env = _base_env(setup.home) | {
        "CODEX_HOME": str(codex_home),
        "JARVIS_GATEWAY_TOKEN": gw.token,
    }
    binary = setup.install / "node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp"
    return Launch(
        (str(binary), "-c", "analytics.enabled=false"), env, {".codex/config.toml": config}
    )


def _claude(setup: Setup) -> Launch:
    gw = setup.gateway
    env = _base_env(setup.home) | {
        "ANTHROPIC_BASE_URL": gw.url,
        "ANTHROPIC_API_KEY": gw.token,
        "ANTHROPIC_MODEL": gw.model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    if setup.root:  # Claude Code refuses to run as root outside a sandbox it knows of
        env["IS_SANDBOX"] = "1"
    files = {}
    if setup.offline:
        # A denied tool is not offered to the model (its user settings).
        deny = {"permissions": {"deny": ["WebFetch", "WebSearch"]}}
        files[".claude/settings.json"] = json.dumps(deny)
    return Launch((str(setup.install / "node_modules/.bin/claude-agent-acp"),), env, files)


def _gemini(setup: Setup) -> Launch:
    gw = setup.gateway
    env = _base_env(setup.home) | {
        "GOOGLE_GEMINI_BASE_URL": gw.url,
        "GEMINI_API_KEY": gw.token,
        "GEMINI_MODEL": gw.model,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
    settings: dict[str, object] = {
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }
    if setup.offline:  # an excluded tool is not offered to the model
        settings["tools"] = {"exclude": ["web_fetch", "google_web_search"]}
    return Launch(
        (str(setup.install / "node_modules/.bin/gemini"), "--acp"),
        env,
        {".gemini/settings.json": json.dumps(settings)},
    )


BUILTIN: Mapping[str, AgentDefinition] = {
    "opencode": AgentDefinition(
        "opencode", "opencode (sst) over ACP, on the run's model (OpenAI chat completions)",
        packages=(("opencode-ai", "1.18.33"),), binary="node_modules/.bin/opencode",
        needs_node=False, dialect="openai-chat", prepare=_opencode, limits_tools=True,
        context=16384,
    ),
    "codex": AgentDefinition(
        "codex", "OpenAI Codex through codex-acp, on the run's model (OpenAI Responses)",
        packages=(("@openai/codex", "0.169.0"), ("@zed-industries/codex-acp", "0.16.0")),
        binary="node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp",
        needs_node=False, dialect="openai-responses", prepare=_codex, context=16384,
    ),
    "claude": AgentDefinition(
        "claude", "Claude Code through claude-agent-acp, on the run's model (Anthropic Messages)",
        packages=(("@zed-industries/claude-agent-acp", "0.23.1"),),
        binary="node_modules/.bin/claude-agent-acp", dialect="anthropic", prepare=_claude,
    ),
    "gemini": AgentDefinition(
        "gemini", "Gemini CLI over ACP, on the run's model (Gemini generateContent)",
        packages=(("@google/gemini-cli", "0.61.0"),), binary="node_modules/.bin/gemini",
        dialect="gemini", prepare=_gemini,
    ),
}  # fmt: skip


def external_names(configured: Mapping[str, object] | None = None) -> tuple[str, ...]:
    return tuple(sorted({*BUILTIN, *(configured or {})}))


def definition(
    name: str, configured: Mapping[str, AgentDefinition] | None = None
) -> AgentDefinition:
    """The external agent called ``name`` (a config entry may not take a built-in's name)."""
    if name in BUILTIN:
        return BUILTIN[name]
    if configured and name in configured:
        return configured[name]
    raise UsageError(
        f"unknown external agent {name!r} (known: {', '.join(external_names(configured))})"
    )
