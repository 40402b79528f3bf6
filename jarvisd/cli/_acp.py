"""``jarvis acp``: serve jarvis's agents to an ACP client (an editor) on stdio, and
list the sessions it recorded."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from ._run_options import build_spec, run_options

if TYPE_CHECKING:
    from .._config import Config
    from ..runs import AgentSpec


@click.group(invoke_without_command=True)
@run_options
@click.pass_context
def acp(ctx: click.Context, /, **run_values: Any) -> None:
    """Be an ACP agent on stdio: an editor (Zed, JetBrains, Neovim...) or an ACP
    client (acpx) sends prompts, jarvis runs the agent (or --team) with the options
    given here and streams its answer, tool calls and plans back.

    Tool calls other than pure thought (calculator, think) ask the client first.
    Every session is recorded: the client can load it again after a restart; list
    them with `jarvis acp sessions`.

    \b
    Examples:
      jarvis acp --agent orchestrator --tools calculator,file_read
      acpx --agent 'jarvis acp' 'What is 17*23?'
    """
    if ctx.invoked_subcommand is not None:
        return
    from ..acp._stdio import serve_stdio  # light: initialize is answered before the rest loads

    def prepare() -> tuple[AgentSpec, Config]:
        from .._config import load_config
        from ..runs import validate_spec

        spec = build_spec("", **run_values)
        config = load_config()
        validate_spec(spec, config)  # an unknown agent, a bad team: a usage error
        return spec, config

    serve_stdio(prepare)


@acp.command("sessions")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON array.")
def sessions(as_json: bool) -> None:
    """List the recorded ACP sessions, newest first."""
    import time

    from ..acp import SessionStore
    from ._terminal import visible

    found = SessionStore().list()
    if as_json:
        click.echo(json.dumps([h.to_dict() for h in found], indent=2, ensure_ascii=False))
        return
    if not found:
        click.echo("no ACP sessions yet")
        return
    for h in found:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(h.updated))
        click.echo(visible(f"{h.session_id}  {when}  {h.mode:<14} {h.cwd}  {h.title}"))
