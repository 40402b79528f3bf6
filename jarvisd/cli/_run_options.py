"""The options that describe a run, shared by ``jarvis ask`` and ``jarvis task submit``,
and the one function that turns them into an :class:`AgentSpec` (at the edge: paths
made absolute, the engine-selecting environment captured)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .._errors import UsageError

if TYPE_CHECKING:
    from ..runs import AgentSpec

__all__ = ["build_spec", "run_options"]

_F = TypeVar("_F", bound=Callable[..., Any])

#: The built-in external agents (jarvisd.external; named here so `--help` loads nothing).
EXTERNAL_AGENTS = frozenset({"opencode", "codex", "claude", "gemini"})

_OPTIONS = (
    click.option(
        "-a",
        "--agent",
        default="",
        help="Agent key (see `jarvis agents list`); default from config.",
    ),
    click.option(
        "-e",
        "--engine",
        default=None,
        help="llamacpp (embedded), ollama, openai, a plugin, or a [credentials.NAME] "
        "(external agents on a cloud model, the key kept on the host); "
        "default from config.",
    ),
    click.option(
        "-m", "--model", default="", help="Model name (catalog name or .gguf path for llamacpp)."
    ),
    click.option(
        "-t",
        "--tools",
        default="",
        help="Comma-separated tools for tool-using agents (ACP agents: MCP tools "
        "only, with --no-sandbox).",
    ),
    click.option(
        "--option",
        "agent_options",
        multiple=True,
        metavar="KEY=VALUE",
        help="An option the agent declares (see `jarvis agents list`), e.g. "
        "mode=structured for orchestrator, max_depth=3 for rlm. Repeatable.",
    ),
    click.option(
        "--context",
        "context_file",
        type=click.Path(dir_okay=False),
        default=None,
        help="A file given to the agent as its context (rlm keeps it in its REPL).",
    ),
    click.option(
        "--team",
        "team_file",
        type=click.Path(dir_okay=False),
        default=None,
        help="Run a team described in a TOML file (agents and a pattern tree) "
        "instead of one agent; see docs/composing-agents.md.",
    ),
    click.option("--sandbox", is_flag=True, help="Run the agent in a network-disabled container."),
    click.option(
        "--no-sandbox",
        is_flag=True,
        help="Run an external agent (opencode, codex, claude, gemini...) on the host "
        "instead of in the sandbox, its default. NOT isolated: warns every run.",
    ),
    click.option(
        "--mount",
        "mounts",
        multiple=True,
        metavar="PATH[:rw]",
        help="Mount a host path into the sandbox (read-only unless :rw). Repeatable.",
    ),
    click.option(
        "--allow-net",
        "allow_net",
        multiple=True,
        metavar="HOST[,HOST...]",
        help="Hosts the run's sandbox may reach through its egress proxy (HOST, "
        "*.SUFFIX, with :PORT; default ports 443 and 80), besides "
        "[sandbox.network] allow. Repeatable. Default: no network.",
    ),
    click.option("--temperature", type=float, default=None, help="Sampling temperature."),
    click.option(
        "--max-tokens",
        type=click.IntRange(min=1),
        default=None,
        help="Most tokens per model reply.",
    ),
    click.option(
        "--max-turns",
        type=click.IntRange(min=1),
        default=None,
        help="Most model turns for tool-using agents.",
    ),
    click.option(
        "--max-tokens-total",
        type=click.IntRange(min=1),
        default=None,
        help="Budget: most tokens (prompt and completion) for the whole run, "
        "nested agents included.",
    ),
    click.option(
        "--max-calls",
        type=click.IntRange(min=1),
        default=None,
        help="Budget: most engine calls for the whole run.",
    ),
    click.option(
        "--max-tool-calls",
        type=click.IntRange(min=1),
        default=None,
        help="Budget: most tool calls for the whole run.",
    ),
    click.option(
        "--max-wall",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Budget: most seconds of wall-clock time for the whole run.",
    ),
)


def run_options(command: _F) -> _F:
    """Decorate ``command`` with every option that describes a run."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def split_hosts(values: Sequence[str]) -> tuple[str, ...]:
    """``--allow-net a,b --allow-net c`` -> (a, b, c), blanks dropped. Here, not beside
    the network policy: importing ``jarvisd.sandbox`` would cost every ``jarvis ask``
    about 0.1 s before it reaches jarvisd."""
    return tuple(h.strip() for v in values for h in v.split(",") if h.strip())


def build_spec(text: str, **values: Any) -> AgentSpec:
    """The spec the run options describe, made absolute here, at the edge. Agent
    options stay text: the run types them against what the agent declares."""
    from ..runs import AgentSpec, parse_option_flags

    if values["mounts"] and values["no_sandbox"]:
        # Whether an agent without --sandbox runs sandboxed anyway (external agents do)
        # is known once the agent is: the run checks it (runs._build).
        raise UsageError("--mount only applies in a sandbox, not with --no-sandbox")
    if values["sandbox"] and values["no_sandbox"]:
        raise UsageError("--sandbox and --no-sandbox contradict each other")
    options = parse_option_flags(values["agent_options"])
    if "workspace" in options or values["agent"] in EXTERNAL_AGENTS:
        # An external agent works in a directory: this one unless it is named, made
        # absolute here, where the caller's working directory is known.
        options["workspace"] = os.path.abspath(os.path.expanduser(options.get("workspace", ".")))
    spec = AgentSpec(
        input=text,
        agent=values["agent"],
        engine=values["engine"],
        model=values["model"],
        tools=tuple(t.strip() for t in values["tools"].split(",") if t.strip()),
        isolation="sandbox" if values["sandbox"] else "host" if values["no_sandbox"] else "default",
        mounts=values["mounts"],
        allow_net=split_hosts(values["allow_net"]),
        context_file=values["context_file"],
        temperature=values["temperature"],
        max_tokens=values["max_tokens"],
        max_turns=values["max_turns"],
        options=options,
        max_tokens_total=values["max_tokens_total"],
        max_calls=values["max_calls"],
        max_tool_calls=values["max_tool_calls"],
        max_wall=values["max_wall"],
        team=_read_team(values["team_file"]),
    )
    return spec.at_edge()


def _read_team(path: str | None) -> str | None:
    """The team file's text, checked here so its errors (with their line) show before
    anything starts."""
    if path is None:
        return None
    from ..patterns._teamfile import MAX_TEAM_BYTES, parse_team

    try:
        with open(path, "rb") as file:
            data = file.read(MAX_TEAM_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read team file {path}: {exc.strerror}") from exc
    text = data.decode("utf-8", "replace")
    parse_team(text, path)
    return text


def _check_labels(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    for item in value:
        key, eq, _ = item.partition("=")
        if not (eq and key.strip()):
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", ctx, param)
    return value


#: ``--node-label KEY=VALUE`` (repeatable): on a Ray cluster, the task's node must
#: carry these labels (``jarvisd.cluster``); the daemon refuses a task no node can take.
node_label_option = click.option(
    "--node-label",
    "node_labels",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_check_labels,
    help="Through jarvisd on a Ray cluster: run only on a node with this label "
    "(ray start --labels); repeatable, added to [cluster] require. A task no node "
    "can take is refused.",
)


def say_notice(notice: str) -> None:
    """What the daemon said on taking a task (e.g. the cluster is down), on stderr."""
    if notice:
        click.echo(f"jarvis: {notice}", err=True)
