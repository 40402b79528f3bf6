"""``jarvis trace``: runs recorded by the trace collector."""

from __future__ import annotations

import json
import time

import click


@click.group()
def trace() -> None:
    """List recorded runs and show one."""


@trace.command("list")
@click.option("-n", "limit", default=20, show_default=True, help="How many (newest first).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_traces(limit: int, as_json: bool) -> None:
    """The newest traces."""
    from ..traces import TraceStore

    traces = TraceStore().list(limit)
    if as_json:
        click.echo(json.dumps([t.summary() for t in traces], indent=2))
        return
    if not traces:
        click.echo("no traces")
    for t in traces:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t.started))
        status = "error" if t.error else "ok"
        click.echo(
            f"{t.id}  {when}  {t.agent:<16} {t.turns:>2} turns {t.tool_calls:>2} tools "
            f"{t.duration_s:7.2f}s {status:<5} {t.input[:50]!r}"
        )


@trace.command("show")
@click.argument("trace_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON with every event.")
@click.option(
    "--mermaid",
    is_flag=True,
    help="Print the run as a mermaid sequence diagram (delegations, tool calls, "
    "handoffs, routes), drawn from its recorded events.",
)
def show(trace_id: str, as_json: bool, mermaid: bool) -> None:
    """One trace (an id or a unique prefix) with its events."""
    from ..traces import TraceStore

    t = TraceStore().get(trace_id)
    if mermaid:
        from ..traces import to_mermaid

        click.echo(to_mermaid(t.events, t.agent), nl=False)
        return
    if as_json:
        click.echo(json.dumps(t.to_dict(), indent=2, default=str))
        return
    for key, value in t.summary().items():
        click.echo(f"{key}: {value}")
    click.echo("events:")
    for event in t.events:
        offset = event["timestamp"] - t.started
        data = {
            k: v for k, v in event["data"].items() if k not in ("input", "content", "arguments")
        }
        click.echo(f"  +{offset:8.3f}s {event['type']:<18} {json.dumps(data, default=str)[:160]}")
