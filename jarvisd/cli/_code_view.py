"""How ``jarvis code`` shows a workspace: its record and diff, and a group's candidates
ranked side by side."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from .._errors import UsageError

if TYPE_CHECKING:
    from ..code import CodeStore, Workspace

__all__ = ["_pick", "_print_group", "_print_workspace", "_render"]


def _pick(store: CodeStore, ws: Workspace, candidate: int | None) -> tuple[list[Any], Workspace]:
    """The ranking of ``ws``'s group, and the member ``candidate`` names (default: the
    best)."""
    from ..code._candidates import group_of, rank

    members = {m.candidate: m for m in group_of(store, ws)}
    ranking = rank(list(members.values()))
    if candidate is None:
        return ranking, members[ranking[0].candidate]
    if candidate not in members:
        raise UsageError(
            f"workspace {ws.id}'s group has candidates "
            f"{', '.join(map(str, sorted(members)))}, not {candidate}"
        )
    return ranking, members[candidate]


def _print_group(
    store: CodeStore, ws: Workspace, candidate: int | None, as_json: bool, pager: bool = False
) -> None:
    """The candidates side by side, ranked, then the chosen one (default: the best)."""
    from ._terminal import for_terminal

    ranking, chosen = _pick(store, ws, candidate)
    if as_json:
        from ..code._candidates import group_of

        members = group_of(store, ws)
        click.echo(
            json.dumps(
                {
                    "group": ws.group,
                    "best": ranking[0].candidate,
                    "candidates": [r.to_dict() for r in ranking],
                    "workspaces": [m.to_dict() for m in members],
                },
                indent=2,
            )
        )
        return
    color = sys.stdout.isatty()
    lines = [
        f"candidates of {ws.group}, ranked by the tests (passed, then fewest failures, "
        "then smallest diff):",
        f"  {'RANK':<4}  {'#':>2}  {'WORKSPACE':<12}  {'AGENT':<18}  {'TESTS':<10}  "
        f"{'FAILURES':>8}  {'DIFF':>5}  {'FILES':>5}  RUN",
    ]
    for place, r in enumerate(ranking, 1):
        failures = "-" if r.failures is None else str(r.failures)
        agent = for_terminal(r.agent)[:18]
        lines.append(
            f"  {place:<4}  {r.candidate:>2}  {r.workspace:<12}  {agent:<18}  "
            f"{r.verdict:<10}  {failures:>8}  {r.diff_lines:>5}  {r.files:>5}  "
            f"{r.failure or 'ok'}"
        )
    lines += [
        "",
        f"candidate {chosen.candidate} (another: jarvis code show {ws.group} --candidate K):",
        "",
    ]
    lines += [x for x in _render(chosen, diff=True, color=color) if not x.startswith("\napply:")]
    lines.append(
        f"\napply: jarvis code apply {ws.group} --candidate {chosen.candidate}   "
        f"(the best: jarvis code apply {ws.group})"
    )
    text = "\n".join(lines)
    if pager:
        click.echo_via_pager(text + "\n")
    else:
        click.echo(text)


def _print_workspace(ws: Workspace, *, diff: bool) -> None:
    click.echo("\n".join(_render(ws, diff=diff, color=sys.stdout.isatty())))


def _render(ws: Workspace, *, diff: bool, color: bool) -> list[str]:
    """The workspace for a person. What the agent wrote (summary, diff, test output) is
    cleaned of escape sequences on a terminal."""
    from ._terminal import for_terminal

    def clean(text: str) -> str:
        return for_terminal(text) if color else text

    def style(text: str, **kw: Any) -> str:
        return click.style(text, **kw) if color else text

    out = ws.outcome
    lines = [
        style(f"workspace {ws.id}", bold=True) + f"  {ws.shown_state}",
        f"project:   {ws.source}",
        f"workspace: {ws.path} ({ws.kind}, branch {ws.branch})",
        f"agent:     {ws.agent or '(default)'}   task: {clean(ws.task)[:200]}",
    ]
    if ws.left_out:
        shown = ", ".join(f"{x['path']} ({x['reason']})" for x in ws.left_out[:20])
        more = len(ws.left_out) - 20 + ws.more_left_out
        lines.append(f"left out:  {clean(shown)}" + (f" and {more} more" if more > 0 else ""))
    from ..code._testrun import describe

    for key, label in (("test_before", "test before"), ("test_after", "test after")):
        test = out.get(key)
        if isinstance(test, dict):
            verdict = clean(describe(test))
            lines.append(
                f"{label + ':':<13}{style(verdict, fg='green' if test.get('passed') else 'red')}"
                f"  ({clean(str(test.get('command')))})"
            )
    rounds = out.get("rounds") or []
    if len(rounds) > 1:
        said = ", ".join(
            f"{r.get('round')}: {clean(describe(r.get('test')) or 'no test')}"
            for r in rounds
            if isinstance(r, dict)
        )
        lines.append(f"rounds:      {len(rounds)} of {ws.rounds} ({said})")
    failure = out.get("failure")
    if isinstance(failure, dict):
        lines.append(
            style(
                f"failure:   {failure.get('code')}: {clean(str(failure.get('message')))}", fg="red"
            )
        )
    if out.get("summary"):
        lines += ["summary:", *("  " + line for line in clean(str(out["summary"])).splitlines())]
    files = out.get("files") or []
    if ws.state in ("done", "failed", "applied"):
        if files:
            lines.append(f"files:     {len(files)} touched")
            lines += [f"  {f['status']} {clean(f['path'])}" for f in files]
        elif out.get("no_change_claimed"):
            lines.append(style("files:     no change, though the summary claims one", fg="red"))
        else:
            lines.append("files:     no change")
    if diff and out.get("diff"):
        lines.append("")
        for line in clean(str(out["diff"])).splitlines():
            if line.startswith(("+++", "---")):
                lines.append(style(line, bold=True))
            elif line.startswith("+"):
                lines.append(style(line, fg="green"))
            elif line.startswith("-"):
                lines.append(style(line, fg="red"))
            elif line.startswith("@@"):
                lines.append(style(line, fg="cyan"))
            else:
                lines.append(line)
        if out.get("diff_truncated"):
            lines.append(f"[diff cut at its first {len(out['diff'])} characters]")
    if ws.state in ("done", "failed") and files:
        lines.append(f"\napply: jarvis code apply {ws.id}   discard: jarvis code discard {ws.id}")
    return lines
