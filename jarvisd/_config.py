"""Configuration: one TOML file, parsed once into typed, frozen sections.

A bad file raises :class:`ConfigError` naming the file, the dotted key and what was
expected. Unknown keys are errors too: a typo must not silently fall back to a default.
Every numeric key has bounds (:class:`Bounds`, in its field's metadata): a value out of
range, NaN or infinite is refused the same way, naming the allowed range.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ._errors import ConfigError, JarvisError
from ._paths import paths

__all__ = [
    "AgentConfig",
    "AgentsConfig",
    "Bounds",
    "ClaudeCodeConfig",
    "ClusterConfig",
    "CodeConfig",
    "Config",
    "CredentialConfig",
    "DaemonConfig",
    "EngineConfig",
    "ExternalAgentConfig",
    "LlamaCppConfig",
    "McpConfig",
    "McpServerConfig",
    "NetworkConfig",
    "OllamaConfig",
    "OpenAIConfig",
    "SandboxConfig",
    "ToolsConfig",
    "UiConfig",
    "load_config",
]


@dataclass(frozen=True, slots=True)
class Bounds:
    """The range a numeric key may take: ``low`` to ``high`` (None: open), with ``low``
    itself excluded when ``above`` (a timeout must be more than 0). Never NaN or inf."""

    low: float | None = None
    high: float | None = None
    above: bool = False

    def admits(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            return False
        return self.high is None or value <= self.high

    def describe(self, integer: bool) -> str:
        kind = "an integer" if integer else "a finite number"
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            return f"{kind} from {low} to {high}"
        if self.low is not None:
            return f"{kind} {'>' if self.above else '>='} {low}"
        if self.high is not None:
            return f"{kind} <= {high}"
        return kind


def _number(value: float | None) -> str:
    return str(int(value)) if value is not None and float(value).is_integer() else f"{value}"


_Number = typing.TypeVar("_Number", int, float)


def _num(
    default: _Number, low: float | None = None, high: float | None = None, above: bool = False
) -> _Number:
    """A numeric field with its bounds."""
    return field(default=default, metadata={"bounds": Bounds(low, high, above)})


@dataclass(frozen=True, slots=True)
class OllamaConfig:
    host: str = ""  # empty: OLLAMA_HOST, else http://127.0.0.1:11434
    # Seconds for a reply (connect_timeout: to connect).
    timeout: float = _num(300.0, 0, above=True)
    connect_timeout: float = _num(2.0, 0, above=True)
    # num_ctx is the model's real context length up to this: Ollama allocates the whole
    # KV cache up front, and a 128k window would take many GB. 0: no cap.
    max_context: int = _num(32768, 0)


@dataclass(frozen=True, slots=True)
class OpenAIConfig:
    base_url: str = "http://127.0.0.1:8000/v1"
    # The variable holding the server's key (unset: no key sent).
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = _num(300.0, 0, above=True)


@dataclass(frozen=True, slots=True)
class LlamaCppConfig:
    model: str = ""  # a catalog name or a .gguf path; empty: the strongest catalog model present
    # Where the window starts: opencode and codex size it for themselves before they start
    # (16384). It grows for a longer request (one reload) up to the model's trained length,
    # while its cache fits in half the free memory; else the error names this key and --tools.
    n_ctx: int = _num(4096, 1)
    n_threads: int = _num(0, 0)  # 0: all cores
    chat_format: str = ""  # empty: the GGUF's own template


@dataclass(frozen=True, slots=True)
class EngineConfig:
    # "auto": a reachable Ollama, else the embedded engine (llamacpp).
    default: Literal["auto", "llamacpp", "ollama", "openai"] = "auto"
    model: str = ""  # empty: the engine's default
    ollama: OllamaConfig = field(default_factory=OllamaConfig)
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    llamacpp: LlamaCppConfig = field(default_factory=LlamaCppConfig)


@dataclass(frozen=True, slots=True)
class AgentConfig:
    # The agent of a run that names none (--agent).
    default: str = "simple"
    temperature: float = _num(0.7, 0, 2)
    max_tokens: int = _num(1024, 1)
    # Model turns of a tool-using agent (max_tokens: of each model reply).
    max_turns: int = _num(10, 1)
    # Budgets for a whole run, nested agents included (0: unlimited).
    max_tokens_total: int = _num(0, 0)
    # Engine calls (max_tool_calls: tool calls; max_wall: seconds).
    max_calls: int = _num(0, 0)
    max_tool_calls: int = _num(0, 0)
    max_wall: float = _num(0.0, 0)  # seconds
    # The fraction of a budget at which a run publishes a budget_warning (0: never).
    budget_warning: float = _num(0.8, 0, 1)


@dataclass(frozen=True, slots=True)
class ToolsConfig:
    # file_read refuses everything until roots are listed.
    file_read_roots: tuple[str, ...] = ()
    file_read_max_bytes: int = _num(1_000_000, 1)
    # CodeAct fetches the URLs a task names only when true.
    allow_network: bool = False
    # Seconds for one tool call.
    timeout: float = _num(30.0, 0, above=True)
    llm_model: str = ""  # model for the `llm` tool (empty: the run's model)
    memory_results: int = _num(5, 1)  # hits the `retrieval` tool returns


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """``[sandbox.network]``: the hosts every sandboxed run may reach through its egress
    proxy (``jarvisd.netpolicy``). Entries are exact hosts or ``*.suffix``, with an
    optional ``:PORT`` (default 443 and 80); a deny entry wins over an allow entry;
    ``hosts`` maps a name to the address the proxy connects to (a mirror on the LAN).
    Empty (the default): no network at all."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    hosts: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    # "none": a host process, not isolated (jarvis says so on every run).
    backend: Literal["docker", "podman", "bwrap", "none"] = "docker"
    docker_host: str = ""  # empty: DOCKER_HOST, else the engine's default socket
    # A tcp:// engine's TLS client certificates: a directory with ca.pem, cert.pem and
    # key.pem (empty: DOCKER_CERT_PATH when DOCKER_TLS_VERIFY is set). A tcp:// engine
    # without them is refused unless it listens on loopback.
    docker_tls: str = ""
    # Treat the engine as on another machine even when its address is local (a port
    # forwarded from elsewhere, `ssh -L`): mounts travel as archives, never binds. An
    # engine elsewhere (tcp:// beyond loopback, ssh://) is treated so always.
    docker_remote: bool = False
    # What a run's archives to and from such an engine may hold (its mounts, jarvis's
    # code and a `:rw` mount's change each way): bytes and files; past them it fails.
    archive_max_bytes: int = _num(512 << 20, 1)
    archive_max_files: int = _num(50_000, 1)
    image: str = "jarvis-sandbox:latest"
    # The roots a mount may lie under, read-only unless :rw; none: every mount refused.
    allowed_roots: tuple[str, ...] = ()  # "PATH" or "PATH:rw"
    # Seconds of the program's own time (its clock stands still while it waits for
    # inference); memory, cpus and pids: each container's limits.
    timeout: float = _num(120.0, 0, above=True)
    memory: str = "512m"
    cpus: float = _num(1.0, 0, above=True)
    pids: int = _num(128, 8)
    tmp_size: str = "64m"  # the tmpfs at /tmp, the only writable place besides :rw mounts
    # A mounted tree with more entries is refused: too large to check for secrets.
    # (jarvis code raises it for its workspace.)
    max_mount_entries: int = _num(20_000, 1)
    # Containers kept started (the REPL waiting) for the code agents' sessions; 0: off.
    warm_pool: int = _num(0, 0, 32)
    # Seconds the container engine has to answer one short API call (create, start,
    # remove, a ping): past that it "stopped answering" and the run fails with
    # sandbox_unavailable rather than hanging until the task's limit.
    engine_timeout: float = _num(15.0, 0, above=True)
    # Egress: what a sandboxed run may reach (nothing by default).
    network: NetworkConfig = field(default_factory=NetworkConfig)


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    # Tasks run at once, tasks waiting at most (max_queued), seconds a task may run.
    max_concurrent: int = _num(2, 1)
    max_queued: int = _num(1000, 1)
    task_timeout: float = _num(3600.0, 0, above=True)
    # A request line's limit: at least room for every request without a long prompt.
    max_frame_bytes: int = _num(1_048_576, 1024, 64 * 1024 * 1024)
    # `task submit --watch` refuses a tree with more directories (each is an inotify watch).
    watch_max_dirs: int = _num(10_000, 1)
    # An ask worker whose engines (a loaded model) sat idle this long exits to free them.
    ask_idle_unload: float = _num(300.0, 0, above=True)


@dataclass(frozen=True, slots=True)
class ExternalAgentConfig:
    """``[agents.external.NAME]``: another program that speaks ACP (or jarvis frames)."""

    command: tuple[str, ...] = ()
    protocol: Literal["acp", "frames"] = "acp"
    description: str = ""
    # The context window (tokens) its first prompt needs: the embedded engine is sized
    # for it before the agent starts (0: as the engine is; it still grows on demand).
    context: int = _num(0, 0, 1_048_576)


@dataclass(frozen=True, slots=True)
class AgentsConfig:
    """``[agents]``: external agents. ``permissions`` answers their permission requests
    per ACP tool kind (read, edit, delete, move, search, execute, think, fetch,
    switch_mode, other, and ``default``): "allow", "deny" or "ask"."""

    permissions: Mapping[str, Literal["allow", "deny", "ask"]] = field(default_factory=dict)
    # Seconds a daemon task waits for `jarvis task approve|deny` before it is denied.
    approval_timeout: float = _num(600.0, 0, above=True)
    external: Mapping[str, ExternalAgentConfig] = field(default_factory=dict)
    # Hosts one agent's sandbox may reach besides [sandbox.network]'s: agent key ->
    # allow entries (``[agents.network] codex = ["api.openai.com"]``).
    network: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Sandboxed agents jarvisd keeps started for each agent of ``warm_agents``, each in
    # its own container with its ACP `initialize` answered, for `jarvis ask --agent`
    # runs to claim (``jarvisd.external._agentpool``); 0: off. Root only.
    warm: int = _num(1, 0, 8)
    # Which agents are kept started. codex by default: an idle one holds ~13 MB. An
    # idle opencode holds ~280 MB and each start costs ~5 CPU-seconds (again after
    # every run and every daemon start), which a user who never runs it should not pay.
    warm_agents: tuple[Literal["codex", "opencode"], ...] = ("codex",)


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One ``[mcp.servers.NAME]`` table: a stdio MCP server whose tools become
    ``NAME.tool``. The program gets a minimal environment plus ``env``, and a fresh
    temporary directory to work in. In a sandboxed run it runs in the sandbox, where it
    sees the image (bwrap: the host's /usr) and ``mounts`` ("PATH" or "PATH:rw", checked
    against ``sandbox.allowed_roots`` like ``--mount``), nothing else of the host."""

    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[str, ...] = ()
    timeout: float = _num(30.0, 0, above=True)  # seconds for one tool call
    startup_timeout: float = _num(30.0, 0, above=True)  # start, initialize, list tools


@dataclass(frozen=True, slots=True)
class McpConfig:
    servers: Mapping[str, McpServerConfig] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClaudeCodeConfig:
    # The environment variable holding a real Anthropic key. Empty (the default): the
    # run's local model through the gateway; a key is never taken from the environment
    # unless named here.
    api_key_env: str = ""


@dataclass(frozen=True, slots=True)
class CodeConfig:
    # What `jarvis code` records of an agent's change at most: one file, and all the
    # files it touched together (bytes; a sparse file counts at its size). A larger
    # change is not recorded, and the run fails saying so.
    max_file_bytes: int = _num(50 * 1024 * 1024, 1)
    max_change_bytes: int = _num(500 * 1024 * 1024, 1)
    # The setup command of every run (--setup CMD wins); "": detected (a Python project
    # gets a virtual environment with its dependencies and pytest; --no-setup: none).
    setup: str = ""
    # The sandbox image of every run, when the project needs its own toolchain ("":
    # the image of .devcontainer/devcontainer.json when it names one, else
    # sandbox.image). It must be in the engine: jarvis never pulls one.
    image: str = ""


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """``[cluster]``: where a daemon task's worker runs. "local": a process on this
    machine (the default); "ray": on a node of a Ray cluster, placed by the resources
    its spec needs (``jarvisd.cluster``). The store, the socket and approvals stay here."""

    backend: Literal["local", "ray"] = "local"
    # "auto" (a cluster started on this machine with `ray start`), "HOST:PORT" (its
    # GCS) or "ray://HOST:PORT" (a Ray client server).
    address: str = "auto"
    # What every task's node must have besides what its spec needs: "KEY=VALUE" a node
    # label (`ray start --labels`), "NAME" one unit of a custom resource. Narrows placement
    # as `jarvis task submit --node-label` does; a task no node can satisfy is refused.
    require: tuple[str, ...] = ()
    # When the cluster cannot be reached: "wait" for it (the task stays queued on the
    # cluster, saying so), or "local": run the task as a worker on this machine.
    fallback: Literal["wait", "local"] = "wait"


@dataclass(frozen=True, slots=True)
class UiConfig:
    """``[ui]``: the web console jarvisd serves on a loopback port (``jarvis ui``)."""

    enabled: bool = True
    # 0: any free port (the URL `jarvis ui` prints names it).
    port: int = _num(8765, 0, 65535)


@dataclass(frozen=True, slots=True)
class CredentialConfig:
    """``[credentials.NAME]``: a cloud API key the host holds for external agents.

    ``--engine NAME`` (or ``agents``, for the agents named there) serves a run's agent
    through its inference gateway as a pass-through to ``upstream``: the gateway adds
    the key, read from the host's ``env`` variable when the run starts; the sandbox
    sees only the run's token. ``dialect``: the vendor API the upstream speaks
    ("anthropic", "openai" for Responses and chat completions, "gemini"); it may be
    left out for the vendors' own hosts (see ``jarvisd.gateway._upstream``)."""

    env: str = ""
    upstream: str = ""
    dialect: Literal["", "anthropic", "openai", "gemini"] = ""
    # The model the agent is told to ask for when the run names none (--model).
    model: str = ""
    # External agents that use this credential when the run names no --engine.
    agents: tuple[str, ...] = ()
    # Seconds the upstream has to answer and then between two reads of a reply.
    timeout: float = _num(600.0, 0, above=True)


#: Where a Ray cluster answers: "auto", its GCS as HOST:PORT, or a client server.
CLUSTER_ADDRESS = re.compile(r"auto|(ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}")

#: One ``[cluster] require`` entry: a node label "KEY=VALUE" or a resource "NAME".
CLUSTER_REQUIREMENT = re.compile(r"[A-Za-z0-9_./:-]{1,128}(=[A-Za-z0-9_./:-]{0,128})?")

#: A server's name is the first half of its tools' names (``NAME.tool``).
MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")


@dataclass(frozen=True, slots=True)
class Config:
    engine: EngineConfig = field(default_factory=EngineConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    agents: AgentsConfig = field(default_factory=AgentsConfig)
    mcp: McpConfig = field(default_factory=McpConfig)
    claude_code: ClaudeCodeConfig = field(default_factory=ClaudeCodeConfig)
    code: CodeConfig = field(default_factory=CodeConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    ui: UiConfig = field(default_factory=UiConfig)
    credentials: Mapping[str, CredentialConfig] = field(default_factory=dict)
    #: The file this was read from (None: defaults only).
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("source")
        return data


def load_config(path: Path | None = None) -> Config:
    """Read the config file (missing file: defaults). Raises ConfigError when bad."""
    file = path or paths().config_file
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        if path is not None or os.environ.get("JARVIS_CONFIG"):
            raise ConfigError(str(file), "", "an existing file") from None
        return Config()
    except OSError as exc:
        raise ConfigError(str(file), "", f"a readable file ({exc.strerror})") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(str(file), "", f"valid TOML ({exc})") from exc
    config = _build(Config, data, str(file), "")
    return dataclasses.replace(config, source=str(file))


def parse_config(data: Mapping[str, Any], source: str = "<config>") -> Config:
    return _build(Config, data, source, "")


_T = typing.TypeVar("_T")


def _build(cls: type[_T], data: object, file: str, prefix: str) -> _T:
    if not isinstance(data, Mapping):
        raise ConfigError(file, prefix.rstrip(".") or "<top>", "a table", data)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}  # type: ignore[arg-type]
    values: dict[str, object] = {}
    for key, value in data.items():
        dotted = prefix + key
        if key not in fields:
            raise ConfigError(file, dotted, f"one of {', '.join(sorted(fields))} (unknown key)")
        values[key] = _coerce(hints[key], value, file, dotted)
        _check_value(cls, key, values[key], file, dotted)
        bounds = fields[key].metadata.get("bounds")
        if bounds is not None and not bounds.admits(values[key]):
            raise ConfigError(file, dotted, bounds.describe(hints[key] is int), value)
    return cls(**values)


def _check_value(cls: type, key: str, value: Any, file: str, dotted: str) -> None:
    """Checks beyond a value's type, for the few keys that need them."""
    if cls is NetworkConfig or (cls is AgentsConfig and key == "network"):
        _check_network(cls, key, value, file, dotted)
    if cls is ClusterConfig and key == "address" and not CLUSTER_ADDRESS.fullmatch(value):
        raise ConfigError(
            file, dotted, '"auto", "HOST:PORT" or "ray://HOST:PORT" (a Ray cluster)', value
        )
    if cls is ClusterConfig and key == "require":
        for item in value:
            if not CLUSTER_REQUIREMENT.fullmatch(item):
                raise ConfigError(
                    file, dotted, '"KEY=VALUE" (a node label) or "NAME" (a resource)', item
                )
    if cls is Config and key == "credentials":
        _check_credentials(value, file, dotted)
    if cls is McpConfig and key == "servers":
        for name, server in value.items():
            if not MCP_SERVER_NAME.fullmatch(name):
                raise ConfigError(
                    file, f"{dotted}.{name}", "a name of 1 to 32 letters, digits, _ or -"
                )
            if not (server.command and server.command[0]):
                raise ConfigError(
                    file, f"{dotted}.{name}.command", "a list: the program and its arguments"
                )


def _check_network(cls: type, key: str, value: Any, file: str, dotted: str) -> None:
    """Egress entries parse as the proxy will read them (jarvisd.netpolicy)."""
    from .netpolicy import NetPolicy

    checks: list[tuple[str, dict[str, Any]]]
    if cls is AgentsConfig:
        checks = [(f"{dotted}.{name}", {"allow": list(entries)}) for name, entries in value.items()]
    elif key == "hosts":
        checks = [(dotted, {"hosts": dict(value)})]
    else:
        checks = [(f"{dotted}[{i}]", {key: [entry]}) for i, entry in enumerate(value)]
    for where, kwargs in checks:
        try:
            NetPolicy.parse(source=where, **kwargs)
        except ConfigError as exc:  # the policy's own words, placed in this file
            raise ConfigError(file, where, exc.expected, exc.got) from None
        except (JarvisError, ValueError, TypeError) as exc:
            raise ConfigError(file, where, f"a valid entry ({exc})") from None


#: A credential's name: ``--engine NAME``.
CREDENTIAL_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
#: The dialect of a vendor's own API host, so ``dialect`` may be left out for it.
VENDOR_DIALECTS = {
    "api.anthropic.com": "anthropic",
    "api.openai.com": "openai",
    "generativelanguage.googleapis.com": "gemini",
}
#: Engine names a credential may not take: ``--engine NAME`` would be ambiguous.
_ENGINE_NAMES = frozenset({"auto", "llamacpp", "ollama", "openai"})


def credential_dialect(credential: CredentialConfig) -> str:
    """The dialect family a credential's upstream speaks ("" when unknown)."""
    from urllib.parse import urlsplit

    host = (urlsplit(credential.upstream).hostname or "").lower()
    return credential.dialect or VENDOR_DIALECTS.get(host, "")


def check_credential(name: str, credential: CredentialConfig) -> tuple[str, str] | None:
    """What is wrong with ``[credentials.NAME]``: (key, what was expected), or None.
    The key crosses the network only over TLS: a plain-HTTP upstream must be this
    machine's loopback (a stand-in server, a local relay)."""
    from ipaddress import ip_address
    from urllib.parse import urlsplit

    if not CREDENTIAL_NAME.fullmatch(name):
        return "", "a name of 1 to 32 letters, digits, _ or -"
    if name in _ENGINE_NAMES:
        return "", f"a name that is not an engine's ({', '.join(sorted(_ENGINE_NAMES))})"
    if not _ENV_NAME.fullmatch(credential.env):
        return (
            "env",
            "the name of the environment variable holding the key (e.g. ANTHROPIC_API_KEY)",
        )
    try:
        url = urlsplit(credential.upstream)
        url.port  # noqa: B018 - raises for a port out of range
    except ValueError:
        url = None
    if url is None or url.scheme not in ("https", "http") or not url.hostname:
        return "upstream", "the vendor's API as an https:// URL (e.g. https://api.anthropic.com)"
    if url.username is not None or url.password is not None or url.query or url.fragment:
        return "upstream", "a URL without credentials, query or fragment (the key is in env)"
    if url.scheme == "http":
        host = url.hostname
        try:
            loopback = host == "localhost" or ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            return "upstream", "an https:// URL (plain http only to this machine's loopback)"
    if not credential_dialect(credential):
        return "dialect", '"anthropic", "openai" or "gemini": what the upstream speaks'
    if not all(agent and agent.strip() == agent for agent in credential.agents):
        return "agents", "a list of agent names"
    return None


def _check_credentials(credentials: Mapping[str, CredentialConfig], file: str, dotted: str) -> None:
    """``[credentials.NAME]``: checked once here, so a run never starts on a bad one."""
    claimed: dict[str, str] = {}
    for name, credential in credentials.items():
        where = f"{dotted}.{name}"
        problem = check_credential(name, credential)
        if problem is not None:
            key, expected = problem
            raise ConfigError(file, f"{where}.{key}" if key else where, expected)
        for agent in credential.agents:
            if agent in claimed:
                raise ConfigError(
                    file,
                    f"{where}.agents",
                    f"agents named by one credential only ({agent!r} is in {claimed[agent]}'s)",
                )
            claimed[agent] = name


def _coerce(hint: object, value: object, file: str, key: str) -> object:
    origin = typing.get_origin(hint)
    if origin is Mapping:
        if not isinstance(value, Mapping):
            raise ConfigError(file, key, "a table", value)
        item = typing.get_args(hint)[1]
        return {str(k): _coerce(item, v, file, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, file, key + ".")  # type: ignore[arg-type]
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise ConfigError(file, key, "one of " + ", ".join(map(repr, choices)), value)
        return value
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _coerce(args[0], value, file, key)
    if origin is Mapping:
        if not isinstance(value, Mapping):
            raise ConfigError(file, key, "a table", value)
        inner = typing.get_args(hint)[1]
        return {str(k): _coerce(inner, v, file, f"{key}.{k}") for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(file, key, "a list of strings", value)
        item = typing.get_args(hint)[0]
        if typing.get_origin(item) is Literal:
            choices = typing.get_args(item)
            for v in value:
                if v not in choices:
                    raise ConfigError(
                        file, key, "a list of " + ", ".join(map(repr, choices)), value
                    )
        return tuple(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(file, key, "true or false", value)
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(file, key, "an integer", value)
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(file, key, "a number", value)
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(file, key, "a string", value)
        return value
    raise ConfigError(file, key, f"a value of type {hint}", value)  # pragma: no cover
