"""``jarvis task``: long tasks run by jarvisd (submit, follow, wait, cancel)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import click

from jarvisd._errors import UsageError

from ._run_options import build_spec, node_label_option, run_options, say_notice
from ._terminal import visible

if TYPE_CHECKING:
    from jarvisd.daemon import Client, TaskInfo

__all__ = ["format_event", "task"]

# Exit codes of `task wait`: how the task ended.
WAIT_EXIT = {"succeeded": 0, "failed": 1, "cancelled": 4, "interrupted": 5}


def _client(timeout: float = 30.0) -> Client:
    from jarvisd.daemon import Client

    return Client(timeout=timeout)


def _ray_backend() -> bool:
    """Whether this machine's config hands tasks to a Ray cluster (a bad config is the
    daemon's to report, not ``task show``'s)."""
    from jarvisd._config import load_config
    from jarvisd._errors import ConfigError

    try:
        return load_config().cluster.backend == "ray"
    except ConfigError:
        return False


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def format_event(seq: int, event: str, data: dict[str, Any]) -> str | None:
    """One log line for a stored event (None: streamed text, printed through
    ``visible``). What an agent chose (a tool's title, its arguments) is in it: every
    control character is shown as an escape, never sent to the terminal."""
    line = _format_event(seq, event, data)
    return None if line is None else visible(line)


def _format_event(seq: int, event: str, data: dict[str, Any]) -> str | None:
    if event == "inference_delta":
        return None
    if event == "tool_call_start":
        args = json.dumps(data.get("arguments"), ensure_ascii=False)
        return f"[{seq}] tool {data.get('tool')} {args}"
    if event == "tool_call_end":
        status = data.get("status") or ("ok" if data.get("success") else "error")
        content = str(data.get("content", "")).replace("\n", " ")[:200]
        return f"[{seq}] tool {data.get('tool')} -> {status}: {content}"
    if event == "approval_requested":
        return (
            f"[{seq}] waiting for approval: {data.get('tool')} (kind {data.get('kind')}) "
            f"{data.get('arguments')}; answer with `jarvis task approve|deny`"
        )
    if event == "approval":
        verdict = "allowed" if data.get("allowed") else "denied"
        return f"[{seq}] {data.get('tool')} {verdict} ({data.get('by')})"
    if event == "net_connect":
        verdict = "allowed" if data.get("allowed") else "REFUSED"
        reason = f" ({data.get('reason')})" if data.get("reason") else ""
        return (
            f"[{seq}] net {verdict} {data.get('host')}:{data.get('port')}{reason} "
            f"up {data.get('bytes_up', 0)} B, down {data.get('bytes_down', 0)} B"
        )
    if event == "code_setup":
        return f"[{seq}] setup: {data.get('line', '')}"
    if event == "task_end":
        reason = f" ({data.get('reason')})" if data.get("reason") else ""
        return f"[{seq}] task {data.get('state')}{reason}"
    details = " ".join(f"{k}={v}" for k, v in data.items() if k not in ("input", "content"))
    return f"[{seq}] {event} {details}".rstrip()


def _state(info: TaskInfo) -> str:
    return "waiting" if info.waiting is not None else info.state


def _print_info(info: TaskInfo) -> None:
    click.echo(f"id:        {info.id}")
    click.echo(f"state:     {_state(info)}" + (f" ({visible(info.reason)})" if info.reason else ""))
    if info.waiting is not None:
        left = max(0.0, info.waiting.until - time.time())
        click.echo(
            f"waiting:   for approval of {visible(info.waiting.tool)} "
            f"(kind {visible(info.waiting.kind)}), "
            f"denied in {left:.0f} s: jarvis task approve|deny {info.id}"
        )
    click.echo(
        f"agent:     {info.spec.agent or '(default)'}"
        + (f"  tools: {', '.join(info.spec.tools)}" if info.spec.tools else "")
        + ("  sandbox" if info.spec.isolation == "sandbox" else "")
    )
    click.echo(f"input:     {visible(info.spec.input[:200])}")
    click.echo(
        f"created:   {_when(info.created_at)}   started: {_when(info.started_at)}   "
        f"finished: {_when(info.finished_at)}"
    )
    click.echo(
        f"attempts:  {info.attempts}   checkpoints: {info.checkpoint_turns}   "
        f"events: {info.last_seq}"
    )
    click.echo(
        f"usage:     cpu {info.cpu_seconds:.2f} s, memory {info.memory_bytes / 2**20:.1f} MiB"
        + (f" (worker pid {info.worker_pid})" if info.worker_pid else "")
    )
    if info.node and info.node != "local":  # a Ray node's id ([cluster] backend = "ray")
        click.echo(f"node:      {info.node}")
    elif info.node == "local" and _ray_backend():
        # Under a Ray backend a task runs here only as the fallback for an unreachable
        # cluster: say so, or the text reads like any local task's.
        click.echo("node:      this machine (the cluster was unreachable: [cluster] fallback)")
    if info.watch:
        click.echo(f"watch:     {info.watch}")
    if info.rerun_of:
        click.echo(f"re-run of: {info.rerun_of}")
    if info.result is not None:
        failure = info.result.get("failure")
        if isinstance(failure, dict):
            click.echo(
                visible(f"failure:   {failure.get('code')}: {failure.get('message')}", lines=True)
            )
        else:
            click.echo("answer:")
            click.echo(visible(info.result.get("answer", ""), lines=True))


@click.group()
def task() -> None:
    """Hand long tasks to jarvisd: submit, list, show, logs, wait, cancel, approve, deny."""


@task.command()
@click.argument("text")
@run_options
@click.option(
    "--watch",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Re-run the task whenever files under this directory change.",
)
@click.option(
    "--timeout", type=float, default=None, help="Time limit in seconds (default: config)."
)
@node_label_option
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
def submit(
    text: str,
    watch: str | None,
    timeout: float | None,
    node_labels: tuple[str, ...],
    as_json: bool,
    **run_values: Any,
) -> None:
    """Submit TEXT as a task; prints its id at once (the daemon stores it first).

    Takes the same run options as `jarvis ask`; the daemon checks the agent, its
    options and tools before it queues the task (and, on a Ray cluster, that a
    live node can take it)."""
    import dataclasses
    import os

    if not text.strip():
        raise UsageError("the task text is empty")
    spec = dataclasses.replace(build_spec(text, **run_values), node_labels=node_labels)
    info = _client().submit(spec, watch=os.path.abspath(watch) if watch else None, timeout=timeout)
    say_notice(info.notice)
    click.echo(json.dumps(info.to_dict()) if as_json else info.id)


@task.command("list")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(["queued", "running", "succeeded", "failed", "cancelled", "interrupted"]),
    help="Only tasks in this state (repeatable).",
)
@click.option("-n", "--limit", default=50, show_default=True, help="Most tasks to list.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_(states: tuple[str, ...], limit: int, as_json: bool) -> None:
    """List tasks, newest first."""
    tasks = _client().list_tasks(states, limit)
    if as_json:
        click.echo(json.dumps([t.to_dict() for t in tasks], indent=2))
        return
    if not tasks:
        click.echo("no tasks")
        return
    click.echo(f"{'ID':<12}  {'STATE':<11}  {'CREATED':<19}  INPUT")
    for t in tasks:
        text = t.spec.input.replace("\n", " ")
        click.echo(f"{t.id:<12}  {_state(t):<11}  {_when(t.created_at):<19}  {visible(text[:60])}")
        if t.waiting is not None:
            click.echo(
                f"{'':<12}  waits for approval: {visible(t.waiting.tool)} "
                f"(kind {visible(t.waiting.kind)})"
            )


@task.command()
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(task_id: str, as_json: bool) -> None:
    """Show a task: state, timing, attempts, CPU and memory, its answer."""
    info = _client().show(task_id)
    if as_json:
        click.echo(json.dumps(info.to_dict(), indent=2))
    else:
        _print_info(info)


@task.command()
@click.argument("task_id")
@click.option("-f", "--follow", is_flag=True, help="Keep streaming until the task ends.")
@click.option(
    "--from",
    "since",
    default=0,
    show_default=True,
    help="Only events after this sequence number (resume a follow).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per event.")
def logs(task_id: str, follow: bool, since: int, as_json: bool) -> None:
    """Print a task's events (with -f, live until it ends)."""
    in_text = False
    for ev in _client().logs(task_id, since=since, follow=follow):
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "seq": ev.seq,
                        "event": ev.event,
                        "data": dict(ev.data),
                        "timestamp": ev.timestamp,
                    },
                    ensure_ascii=False,
                )
            )
            continue
        line = format_event(ev.seq, ev.event, dict(ev.data))
        if line is None:
            click.echo(visible(ev.data.get("text", ""), lines=True), nl=False)
            in_text = True
            continue
        if in_text:
            click.echo()
            in_text = False
        click.echo(line)
    if in_text:
        click.echo()


@task.command()
@click.argument("task_id")
@click.option("--timeout", type=float, default=None, help="Give up after this many seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
def wait(task_id: str, timeout: float | None, as_json: bool) -> None:
    """Wait for a task to end; exit 0 succeeded, 1 failed, 4 cancelled, 5 interrupted,
    6 still running at the timeout."""
    info = _client().wait(task_id, timeout)
    if as_json:
        click.echo(json.dumps(info.to_dict(), indent=2))
    elif info.state == "succeeded" and info.result is not None:
        click.echo(visible(info.result.get("answer", ""), lines=True))
    else:
        click.echo(
            f"{info.id}: {info.state}" + (f" ({visible(info.reason)})" if info.reason else "")
        )
    raise click.exceptions.Exit(WAIT_EXIT.get(info.state, 6))


@task.command()
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
def cancel(task_id: str, as_json: bool) -> None:
    """Cancel a task: its engine request, tools, containers and subprocesses stop."""
    info = _client().cancel(task_id)
    click.echo(json.dumps(info.to_dict()) if as_json else f"{info.id}: {info.state}")


def _answer(task_id: str, allow: bool, as_json: bool) -> None:
    info = _client().answer(task_id, allow)
    click.echo(json.dumps(info.to_dict()) if as_json else f"{info.id}: {_state(info)}")


@task.command()
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
def approve(task_id: str, as_json: bool) -> None:
    """Allow the tool a task waits for (an external agent's permission request under
    "ask" in [agents.permissions]; unanswered, it is denied after
    agents.approval_timeout seconds)."""
    _answer(task_id, True, as_json)


@task.command()
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
def deny(task_id: str, as_json: bool) -> None:
    """Refuse the tool a task waits for; the agent goes on without it."""
    _answer(task_id, False, as_json)
