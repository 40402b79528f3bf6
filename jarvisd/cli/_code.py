"""``jarvis code``: an agent changes a project on an isolated workspace; the change
comes back as a diff to review, then to apply or discard."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from .._errors import DaemonUnavailable, UsageError
from ._code_view import _pick, _print_group, _print_workspace, _render
from ._run_options import node_label_option, say_notice, split_hosts

if TYPE_CHECKING:
    from pathlib import Path

    from .._events import Event
    from ..code import CodeStore, Workspace
    from ..runs import AgentSpec, Failure

__all__ = ["code"]

_RUN_HELP = """Let an agent work on PATH for TASK, on an isolated workspace.

A git repository gets a worktree on a new branch at HEAD with its uncommitted changes
(tracked and untracked, not ignored); any other directory is copied. Blocked names
(.env*, keys, credentials...) and virtual environments are left out and listed. The
agent runs in the sandbox with the network off; the project is not touched until
`jarvis code apply ID`. An external agent (--agent opencode) has the workspace as its
cwd, and its edits there are allowed. Through jarvisd when it runs (a task: `jarvis
task logs -f`, `jarvis task cancel`), else in this process.

With --test, the agent's first message holds the failing tests' output and the files
they name; when it says it is done the tests run again, and while they fail it goes on
with their new output, up to --rounds rounds in all, within one budget.

Exit 0 when the agent finished (with or without a change), else the run's failure code:
`no_change` (1) when its summary claims a change and it changed no file, `test_error`
(1) when the test command could not run the tests (not found, a module missing, a
pytest collection error, a timeout): that is not a failing test."""


class _CodeGroup(click.Group):
    """``jarvis code PATH TASK`` is ``jarvis code run PATH TASK``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_CodeGroup)
def code() -> None:
    """Code agents on local projects: work on an isolated workspace, review the diff,
    then apply or discard it.

    \b
    jarvis code PATH "TASK" [--agent A] [--test CMD]   (same as `jarvis code run`)
    jarvis code PATH "TASK" --candidates N | --agents A,B [--test CMD]
    jarvis code list | show ID | apply ID [--candidate K] | discard ID
    jarvis code resume ID   (a run interrupted by a crash, from where it got to)

    Every one of these first completes or rolls back an apply that was interrupted
    (kill -9, a crash): see `jarvis code apply --help`.
    """
    from ..code._recover import recover

    for line in recover(_store(), _state_dir()):
        click.echo(f"jarvis: {line}", err=True)


def _store() -> CodeStore:
    from .._paths import paths
    from ..code import CodeStore

    return CodeStore(paths().state / "code.db")


def _state_dir() -> Path:
    from .._paths import paths

    return paths().state


@code.command("run", help=_RUN_HELP)
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.argument("task_text", metavar="TASK")
@click.option(
    "-a",
    "--agent",
    default="native_openhands",
    show_default=True,
    help="The agent (see `jarvis agents list`).",
)
@click.option(
    "--test",
    "test_command",
    default="",
    metavar="CMD",
    help="A test command, run in the sandbox (workspace read-only) before and after.",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1, max=20),
    default=3,
    show_default=True,
    help="With --test: the most agent rounds (the agent goes on while the tests fail).",
)
@click.option(
    "--candidates",
    type=click.IntRange(min=1, max=8),
    default=1,
    show_default=True,
    help="Run N candidates of the agent at once, each in its own workspace, under one "
    "budget; ranked by the tests (all pass, then fewest failures, then smallest diff).",
)
@click.option(
    "--agents",
    default="",
    metavar="A,B,...",
    help="Candidates of these agents (one each), as --candidates.",
)
@click.option(
    "--respect-gitignore",
    is_flag=True,
    help="For a directory that is not a git repository: leave out what its "
    ".gitignore files exclude (a worktree never holds ignored files).",
)
@click.option("-e", "--engine", default=None, help="Engine; default from config.")
@click.option("-m", "--model", default="", help="Model; default from config.")
@click.option("--temperature", type=float, default=None, help="Sampling temperature.")
@click.option("--max-turns", type=click.IntRange(min=1), default=None, help="Most model turns.")
@click.option(
    "--max-wall",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Budget: most seconds of wall-clock time for the agent's run.",
)
@click.option(
    "--allow-net",
    "allow_net",
    multiple=True,
    metavar="HOST[,HOST...]",
    help="Hosts the agent's sandbox may reach through its egress proxy (HOST, "
    "*.SUFFIX, with :PORT), besides [sandbox.network] allow. Repeatable. "
    "Default: no network.",
)
@click.option(
    "--setup",
    "setup_command",
    default="",
    metavar="CMD",
    help="Prepare the project's environment with CMD, in the sandbox, in a venv "
    "cached by its dependency files (default: [code] setup, else detected: "
    "a Python project gets its dependencies, test extras and pytest).",
)
@click.option("--no-setup", is_flag=True, help="No setup, not even a detected one.")
@click.option(
    "--image",
    default="",
    metavar="IMAGE",
    help="The sandbox image of the run (default: [code] image, else the image of "
    "the project's .devcontainer/devcontainer.json, else sandbox.image). It "
    "must be in the engine: jarvis never pulls.",
)
@node_label_option
@click.option("--no-daemon", is_flag=True, help="Run in this process even when jarvisd runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the workspace as JSON.")
def run(
    path: str,
    task_text: str,
    agent: str,
    test_command: str,
    rounds: int,
    candidates: int,
    agents: str,
    respect_gitignore: bool,
    engine: str | None,
    model: str,
    temperature: float | None,
    max_turns: int | None,
    max_wall: float | None,
    allow_net: tuple[str, ...],
    setup_command: str,
    no_setup: bool,
    image: str,
    node_labels: tuple[str, ...],
    no_daemon: bool,
    as_json: bool,
) -> None:
    from ..runs import AgentSpec

    if not task_text.strip():
        raise UsageError("the task is empty")
    if no_setup and setup_command:
        raise UsageError("--setup and --no-setup disagree: give one")
    if image:
        from ..code._image import valid_image

        if not valid_image(image):
            raise UsageError(f"--image {image[:80]!r} is not an image name")
    store = _store()
    ws = _workspaces(
        store,
        path,
        task_text,
        _candidate_agents(agent, candidates, agents),
        agent,
        test_command,
        rounds if test_command else 1,
        respect_gitignore,
        setup_command,
        no_setup,
        image,
    )
    spec = AgentSpec(
        input=task_text,
        agent=agent,
        engine=engine,
        model=model,
        temperature=temperature,
        max_turns=max_turns,
        max_wall=max_wall,
        workspace=ws.id,
        allow_net=split_hosts(allow_net),
        node_labels=node_labels,
    ).at_edge()
    _execute(store, ws, spec, no_daemon, as_json)


def _execute(
    store: CodeStore, ws: Workspace, spec: AgentSpec, no_daemon: bool, as_json: bool
) -> None:
    """Run ``spec`` on ``ws`` through jarvisd when it runs (unless ``no_daemon``), else
    in this process, and report the workspace after it."""
    failure = None
    task_id = None if no_daemon else _submit(spec)
    if task_id is not None:
        failure = _follow(task_id)
        network = _task_network(task_id)
    else:
        from .._events import EventType
        from .._runcontext import RunContext
        from ..runs import LocalHost

        context = RunContext()
        context.bus.subscribe(_say_setup, EventType.CODE_SETUP)
        outcome = LocalHost().run(spec, context)
        failure = outcome.failure
        network = outcome.metadata.get("network")
    _report(store, store.get(ws.id), network, failure, as_json)


def _workspaces(
    store: CodeStore,
    path: str,
    task_text: str,
    chosen: list[str],
    agent: str,
    test_command: str,
    rounds: int,
    respect_gitignore: bool,
    setup_command: str,
    no_setup: bool,
    image: str,
) -> Workspace:
    """The run's workspace (the group's first, for candidates), prepared and said."""
    from ..code import prepare

    if len(chosen) > 1:
        from ..code._candidates import group_of, prepare_group

        ws = prepare_group(
            path,
            store=store,
            state_dir=_state_dir(),
            task=task_text,
            agents=chosen,
            test=test_command,
            respect_gitignore=respect_gitignore,
            rounds=rounds,
        )
        made = group_of(store, ws)
    else:
        ws = prepare(
            path,
            store=store,
            state_dir=_state_dir(),
            task=task_text,
            agent=agent,
            test=test_command,
            respect_gitignore=respect_gitignore,
            rounds=rounds,
        )
        made = [ws]
    if setup_command or no_setup or image:  # every candidate sets up the same way
        made = [
            store.update(one, setup=setup_command, no_setup=no_setup, image=image) for one in made
        ]
        ws = made[0]
    for one in made:
        number = f"candidate {one.candidate} ({one.agent}): " if one.candidate else ""
        click.echo(
            f"{number}workspace {one.id}: {one.kind} at {one.path} ({one.files} files, "
            f"{len(one.left_out) + one.more_left_out} left out, {one.setup_s:.2f} s)",
            err=True,
        )
    return ws


def _report(
    store: CodeStore,
    ws: Workspace,
    network: object,
    failure: Failure | None,
    as_json: bool,
) -> None:
    """The run's workspace (or group) after the run, its egress, and its failure."""
    if ws.group:
        _print_group(store, ws, None, as_json)
    elif as_json:
        click.echo(
            json.dumps({**ws.to_dict(), **({"network": network} if network else {})}, indent=2)
        )
    else:
        _print_workspace(ws, diff=True)
    if not as_json and isinstance(network, dict):  # the run's egress: reached, refused
        from ._terminal import visible

        # Host names in it come from the sandboxed program: never raw to a terminal.
        click.echo(visible(str(network.get("line") or network.get("warning") or "")), err=True)
    if failure is not None:
        click.echo(f"jarvis: error: {failure.code}: {failure.message}", err=True)
        raise click.exceptions.Exit(failure.exit_code)


def _say_setup(event: Event) -> None:
    """A line of the setup's progress (pip's output, from the sandbox: escaped)."""
    from ._terminal import visible

    click.echo(visible(f"jarvis: setup: {event.data.get('line', '')}"), err=True)


def _candidate_agents(agent: str, candidates: int, agents: str) -> list[str]:
    """The agent of each candidate: ``--agents`` one each, else ``--candidates`` times
    ``--agent``."""
    named = [a.strip() for a in agents.split(",") if a.strip()]
    if not named:
        return [agent] * candidates
    if candidates not in (1, len(named)):
        raise UsageError(
            f"--candidates {candidates} and --agents name {len(named)} agents: "
            "give one of them (--agents runs one candidate of each)"
        )
    if len(named) > 8:
        raise UsageError(f"--agents: at most 8 candidates (got {len(named)})")
    return named


def _submit(spec: AgentSpec) -> str | None:
    """Hand the run to jarvisd as a task; None when no daemon answers."""
    from ..daemon import Client

    try:
        info = Client(timeout=30.0).submit(spec)
    except DaemonUnavailable:
        return None
    say_notice(info.notice)
    click.echo(f"running as jarvisd task {info.id} (jarvis task logs -f {info.id})", err=True)
    return str(info.id)


def _task_network(task_id: str) -> object:
    """The network summary of a finished task's outcome (None: it had no proxy)."""
    from ..daemon import Client

    result = Client(timeout=30.0).show(task_id).result
    metadata = result.get("metadata") if isinstance(result, dict) else None
    return metadata.get("network") if isinstance(metadata, dict) else None


def _follow(task_id: str) -> Failure | None:
    """Show the task's events until it ends; Ctrl-C cancels it. Its failure, or None."""
    from ..daemon import Client
    from ..runs import Failure
    from ._task import format_event

    client = Client(timeout=30.0)
    try:
        for ev in client.logs(task_id, follow=True):
            line = format_event(ev.seq, ev.event, dict(ev.data))
            if line is not None and ev.event.startswith(
                ("tool_call", "task_", "round", "net_", "code_setup")
            ):
                click.echo(line, err=True)
    except KeyboardInterrupt:
        client.cancel(task_id)
        client.wait(task_id, 30.0)
        return Failure("cancelled", "interrupted by the user")
    info = client.show(task_id)
    if info.state == "succeeded":
        return None
    code = "cancelled" if info.state == "cancelled" else "failed"
    result = info.result or {}
    failure = result.get("failure") if isinstance(result, dict) else None
    if isinstance(failure, dict):
        return Failure(str(failure.get("code")), str(failure.get("message")))
    return Failure(code, info.reason or info.state)


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


@code.command()
@click.argument("ws_id", metavar="ID")
@click.option("--no-daemon", is_flag=True, help="Run in this process even when jarvisd runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the workspace as JSON.")
def resume(ws_id: str, no_daemon: bool, as_json: bool) -> None:
    """Resume the run on workspace ID that was interrupted (jarvisd or the process running
    it was killed, or jarvisd gave it up after dying under it three times).

    The workspace on disk is the run's state: phases that ended (the test before, the
    agent's rounds that ended, their tests) are not redone, and the agent of a round
    that was running starts again on the files as they are, told that it was
    interrupted. A run stopped during a tool call is not resumed: that call's effect is
    unverified (review it with `jarvis code show ID`, then discard it). Through jarvisd
    when it runs (a task), else in this process; the report is `jarvis code run`'s."""
    from ..code._candidates import group_of
    from ..code._resume import check_resumable
    from ..runs import AgentSpec

    store = _store()
    ws = store.get(ws_id)
    lead = store.get(ws.group) if ws.group and ws.group != ws.id else ws
    members = group_of(store, lead)
    stopped = [m for m in members if m.shown_state == "interrupted"]
    for member in stopped or [ws]:
        check_resumable(member)  # raises why it cannot resume
    spec = AgentSpec.from_dict(lead.progress.get("spec") or {})
    if spec.workspace != lead.id:
        raise UsageError(f"workspace {lead.id}'s record names no run to resume")
    click.echo(f"resuming the run on workspace {lead.id}", err=True)
    _execute(store, lead, spec, no_daemon, as_json)


@code.command("list")
@click.option("-n", "--limit", default=50, show_default=True, help="Most workspaces to list.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_(limit: int, as_json: bool) -> None:
    """List workspaces, newest first."""
    found = _store().list(limit)
    if as_json:
        click.echo(json.dumps([_brief(ws) for ws in found], indent=2))
        return
    if not found:
        click.echo("no workspaces")
        return
    click.echo(f"{'ID':<12}  {'STATE':<11}  {'CREATED':<16}  {'FILES':>5}  SOURCE  TASK")
    for ws in found:
        files = len(ws.outcome.get("files") or ())
        task = ws.task.replace("\n", " ")[:50]
        click.echo(
            f"{ws.id:<12}  {ws.shown_state:<11}  {_when(ws.created_at):<16}  {files:>5}  "
            f"{ws.source}  {task}"
        )


def _brief(ws: Workspace) -> dict[str, Any]:
    data = ws.to_dict()
    data["outcome"] = {k: v for k, v in ws.outcome.items() if k != "diff"}
    return data


@code.command()
@click.argument("ws_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the workspace and its diff as JSON.")
@click.option("--no-pager", is_flag=True, help="Never page, even on a terminal.")
@click.option(
    "--candidate",
    type=click.IntRange(min=1),
    default=None,
    help="Of candidates: the one to show in full (default: the best).",
)
def show(ws_id: str, as_json: bool, no_pager: bool, candidate: int | None) -> None:
    """Show a workspace: what was left out, the tests, the agent's summary, the diff
    (coloured and paged on a terminal). Of candidates: all of them ranked side by side,
    then the best (or --candidate K) in full."""
    store = _store()
    ws = store.get(ws_id)
    if ws.group:
        _print_group(store, ws, candidate, as_json, sys.stdout.isatty() and not no_pager)
        return
    if candidate is not None:
        raise UsageError(f"workspace {ws.id} has no candidates: give no --candidate")
    if as_json:
        click.echo(json.dumps(ws.to_dict(), indent=2))
        return
    lines = _render(ws, diff=True, color=sys.stdout.isatty())
    if sys.stdout.isatty() and not no_pager:
        click.echo_via_pager("\n".join(lines) + "\n")
    else:
        click.echo("\n".join(lines))


@code.command("apply")
@click.argument("ws_id", metavar="ID")
@click.option(
    "--candidate",
    type=click.IntRange(min=1),
    default=None,
    help="Of candidates: the one to apply (default: the best by the tests).",
)
def apply_(ws_id: str, candidate: int | None) -> None:
    """Merge the workspace's change onto its project (three-way; refused, with nothing
    written, when the project changed in a conflicting way), then remove the workspace.
    Of candidates, the first workspace's ID applies the best (or --candidate K).

    All or nothing, even when interrupted: Ctrl-C, SIGTERM or a full disk before the
    commit point puts every file back; after it, the apply completes. After a kill -9
    or a crash, the next `jarvis code` command completes or rolls it back."""
    from ..code import apply

    store = _store()
    ws = store.get(ws_id)
    if ws.group and (ws.id == ws.group or candidate is not None):
        # The group's first workspace names the group: the best, or --candidate K.
        ranking, chosen = _pick(store, ws, candidate)
        if candidate is None and ranking[0].tier == 4:
            raise UsageError(
                f"no candidate of {ws.group} has a change to apply (see `jarvis code show`)"
            )
        click.echo(f"candidate {chosen.candidate} (workspace {chosen.id})", err=True)
        ws_id = chosen.id
    elif candidate is not None:
        raise UsageError(f"workspace {ws.id} has no candidates: give no --candidate")
    ws = apply(ws_id, store, _state_dir())
    files = ws.outcome.get("files") or []
    click.echo(f"applied {len(files)} file(s) to {ws.source}")


@code.command()
@click.argument("ws_id", metavar="ID")
def discard(ws_id: str) -> None:
    """Remove the workspace: its files, its worktree and branch, its record."""
    from ..code import discard as discard_workspace

    store = _store()
    ws = store.get(ws_id)
    if ws.shown_state == "running":
        raise UsageError(f"workspace {ws.id} is running: stop its run first (jarvis task cancel)")
    discard_workspace(ws, store, _state_dir())
    click.echo(f"discarded {ws.id}")
