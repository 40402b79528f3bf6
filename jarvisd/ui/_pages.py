"""The console's pages and fragments, rendered from the daemon's typed records. What a
model, an agent or a project produced passes through ``esc``; nothing else builds HTML."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._html import button_form, csrf_field, esc, when
from ._svg import bars

if TYPE_CHECKING:
    from jarvisd._config import Config
    from jarvisd.code import Workspace
    from jarvisd.code._candidates import Ranked
    from jarvisd.daemon._protocol import EventReply, TaskInfo

__all__ = [
    "benchmarks",
    "diff_html",
    "event_html",
    "models",
    "status_html",
    "task_rows",
    "tasks_body",
    "workspace_body",
]

STATES = ("queued", "running", "succeeded", "failed", "cancelled", "interrupted")
TERMINAL = frozenset(STATES[2:])
MAX_EVENT_TEXT = 2000


@dataclass(frozen=True, slots=True)
class Row:
    """A task as the tasks page lists it."""

    id: str
    state: str
    agent: str
    created_at: float
    input: str
    waiting: bool = False


def _state(info: TaskInfo) -> str:
    return "waiting" if info.waiting is not None else info.state


def task_rows(tasks: Iterable[Row], csrf: str) -> str:
    rows = []
    for t in tasks:
        state = "waiting" if t.waiting else t.state
        cancel = (
            ""
            if t.state in TERMINAL
            else button_form(f"/tasks/{t.id}/cancel", "cancel", csrf, cls="danger")
        )
        # Ids are ours (hex); the rest came from the submitter or the store.
        rows.append(
            f'<tr data-id="{esc(t.id)}" class="s-{esc(state)}"><td><a href="/tasks/{esc(t.id)}">'
            f"{esc(t.id)}</a></td><td>{esc(state)}</td><td>{esc(t.agent or '(default)')}</td>"
            f"<td>{when(t.created_at)}</td><td>{esc(t.input, 120)}</td><td>{cancel}</td></tr>"
        )
    return "".join(rows) or '<tr><td colspan="6">no tasks</td></tr>'


def tasks_body(tasks: Sequence[Row], csrf: str, state: str, agent: str, pages: str = "") -> str:
    options = "".join(
        f'<option value="{s}"{" selected" if s == state else ""}>{s}</option>'
        for s in ("", *STATES)
    )
    return (
        '<form method="get" action="/tasks" class="filters">'
        f'<label>state <select name="state">{options}</select></label> '
        f'<label>agent <input name="agent" value="{esc(agent)}" size="12"></label> '
        '<button type="submit">filter</button></form>'
        '<table class="tasks"><thead><tr><th>id</th><th>state</th><th>agent</th>'
        "<th>created</th><th>input</th><th></th></tr></thead>"
        f'<tbody id="rows">{task_rows(tasks, csrf)}</tbody></table>{pages}'
        "<h2>Submit a task</h2>"
        f'<form method="post" action="/tasks" class="submit">{csrf_field(csrf)}'
        '<label>input <textarea name="input" rows="3" cols="60" required></textarea></label>'
        '<label>agent <input name="agent" size="14"></label>'
        '<label>tools <input name="tools" size="24" placeholder="calculator,llm"></label>'
        '<label><input type="checkbox" name="sandbox" value="1"> sandbox</label>'
        '<label>max tokens <input name="max_tokens_total" size="7"></label>'
        '<label>max tool calls <input name="max_tool_calls" size="5"></label>'
        '<label>max seconds <input name="max_wall" size="5"></label>'
        '<label>team file (TOML) <textarea name="team" rows="2" cols="40"></textarea></label>'
        '<button type="submit" id="submit">submit</button></form>'
    )


def _short(data: Mapping[str, Any]) -> str:
    text = json.dumps(dict(data), ensure_ascii=False, default=str)
    return text if len(text) <= MAX_EVENT_TEXT else text[:MAX_EVENT_TEXT] + " ..."


def event_html(seq: int, kind: str, data: Mapping[str, Any], timestamp: float) -> str:
    """One event as a list item: the kinds people read first get their own look."""
    label = esc(kind)
    if kind in ("inference_delta",):
        body = f'<span class="delta">{esc(data.get("text", ""), MAX_EVENT_TEXT)}</span>'
    elif kind.startswith("tool_call"):
        body = (
            f'<span class="tool">{esc(data.get("tool", ""))}</span> '
            f"<code>{esc(_short(data))}</code>"
        )
    elif kind == "net_connect":
        verdict = "allowed" if data.get("allowed") else "REFUSED"
        body = (
            f'<span class="{"ok" if data.get("allowed") else "bad"}">{verdict}</span> '
            f"<code>{esc(data.get('host', ''))}:{esc(data.get('port', ''))}</code> "
            f"up {esc(data.get('bytes_up', 0))} B, down {esc(data.get('bytes_down', 0))} B "
            f"{esc(data.get('reason', ''))}"
        )
    elif kind in ("budget", "budget_warning"):
        used, limit = data.get("used"), data.get("limit")
        gauge = ""
        if isinstance(used, int | float) and isinstance(limit, int | float) and limit > 0:
            pct = max(0, min(100, int(100 * used / limit)))
            gauge = f'<meter min="0" max="100" value="{pct}"></meter> '
        body = gauge + f"<code>{esc(_short(data))}</code>"
    else:
        body = f"<code>{esc(_short(data))}</code>"
    return (
        f'<li class="ev ev-{label}" data-seq="{int(seq)}"><span class="seq">{int(seq)}</span> '
        f'<span class="kind">{label}</span> {body}</li>'
    )


def status_html(info: TaskInfo, csrf: str) -> str:
    """A task's state, what it waits on (with approve and deny), and its answer."""
    parts = [
        f'<p>state: <strong id="state">{esc(_state(info))}</strong>'
        f" (agent {esc(info.spec.agent or '(default)')}; created {when(info.created_at)}"
        f"; finished {when(info.finished_at)})</p>"
    ]
    if info.reason:
        parts.append(f'<p class="reason">{esc(info.reason)}</p>')
    if info.waiting is not None:
        w = info.waiting
        parts.append(
            f'<div class="waiting">waits for approval of <code>{esc(w.tool)}</code> '
            f"(kind {esc(w.kind)}) "
            + button_form(f"/tasks/{info.id}/approve", "approve", csrf, cls="ok")
            + button_form(f"/tasks/{info.id}/deny", "deny", csrf, cls="danger")
            + "</div>"
        )
    if not info.finished:
        parts.append(button_form(f"/tasks/{info.id}/cancel", "cancel", csrf, cls="danger"))
    result = info.result or {}
    if result:
        parts.append(f'<h2>Answer</h2><pre id="answer">{esc(result.get("answer", ""))}</pre>')
        usage = {k: v for k, v in result.items() if k not in ("answer", "events")}
        parts.append(f"<details><summary>result</summary><pre>{esc(_short(usage))}</pre></details>")
    return "".join(parts)


def task_body(info: TaskInfo, events: Iterable[EventReply], csrf: str) -> str:
    items = "".join(event_html(e.seq, e.event, e.data, e.timestamp) for e in events)
    return (
        f'<div id="status">{status_html(info, csrf)}</div>'
        f'<p><a href="/traces/{esc(info.id)}">the trace as a sequence diagram</a></p>'
        f'<h2>Events</h2><ol id="events">{items}</ol>'
    )


# -- code ---------------------------------------------------------------------------


def diff_html(diff: str, view: str) -> str:
    """A unified diff, unified or side by side; each line escaped."""
    lines = diff.splitlines()
    if view != "split":
        out = []
        for line in lines:
            cls = (
                "meta"
                if line.startswith(("+++", "---", "diff ", "index "))
                else "add"
                if line.startswith("+")
                else "del"
                if line.startswith("-")
                else "hunk"
                if line.startswith("@@")
                else "ctx"
            )
            out.append(f'<span class="{cls}">{esc(line)}</span>')
        return f'<pre class="diff unified">{chr(10).join(out)}</pre>'
    rows: list[str] = []
    left: list[str] = []
    right: list[str] = []

    def flush() -> None:
        for i in range(max(len(left), len(right))):
            a = left[i] if i < len(left) else ""
            b = right[i] if i < len(right) else ""
            rows.append(f'<tr><td class="del">{esc(a)}</td><td class="add">{esc(b)}</td></tr>')
        left.clear()
        right.clear()

    for line in lines:
        if line.startswith(("+++", "---", "diff ", "index ", "@@")):
            flush()
            rows.append(f'<tr><td colspan="2" class="meta">{esc(line)}</td></tr>')
        elif line.startswith("-"):
            left.append(line[1:])
        elif line.startswith("+"):
            right.append(line[1:])
        elif line.startswith(" "):
            flush()
            text = esc(line[1:])
            rows.append(f'<tr><td class="ctx">{text}</td><td class="ctx">{text}</td></tr>')
        else:  # "new file mode", "\\ No newline at end of file", ...
            flush()
            rows.append(f'<tr><td colspan="2" class="meta">{esc(line)}</td></tr>')
    flush()
    return f'<table class="diff split">{"".join(rows)}</table>'


def _test(label: str, test: object) -> str:
    if not isinstance(test, Mapping):
        return ""
    from jarvisd.code._testrun import describe

    verdict = "ok" if test.get("passed") else "bad"
    output = test.get("output") or test.get("tail") or ""
    return (
        f'<div class="test"><strong>{esc(label)}</strong>: <span class="{verdict}">'
        f"{esc(describe(dict(test)))}</span> <code>{esc(test.get('command', ''))}</code>"
        f"<details><summary>output</summary><pre>{esc(output)}</pre></details></div>"
    )


def workspace_body(
    ws: Workspace, ranking: Sequence[Ranked], csrf: str, view: str, note: str = ""
) -> str:
    out = ws.outcome
    parts = []
    if note:
        parts.append(f'<div class="note" id="note">{esc(note)}</div>')
    parts.append(
        f'<p>state: <strong id="ws-state">{esc(ws.shown_state)}</strong>; project '
        f"<code>{esc(ws.source)}</code>; agent {esc(ws.agent or '(default)')}</p>"
        f"<p>task: {esc(ws.task, 2000)}</p>"
    )
    if ranking:
        rows = "".join(
            f'<tr><td>{n}</td><td>{int(r.candidate)}</td><td><a href="/code/{esc(r.workspace)}">'
            f"{esc(r.workspace)}</a></td><td>{esc(r.agent)}</td><td>{esc(r.verdict)}</td>"
            f"<td>{'-' if r.failures is None else int(r.failures)}</td><td>{int(r.diff_lines)}</td>"
            f"<td>{int(r.files)}</td><td>{esc(r.failure or 'ok')}</td></tr>"
            for n, r in enumerate(ranking, 1)
        )
        parts.append(
            '<h2>Candidates, side by side</h2><table class="candidates"><tr><th>rank</th>'
            "<th>#</th><th>workspace</th><th>agent</th><th>tests</th><th>failures</th>"
            f"<th>diff lines</th><th>files</th><th>run</th></tr>{rows}</table>"
        )
    if ws.left_out:
        items = "".join(
            f"<li>{esc(x.get('path'))} ({esc(x.get('reason'))})</li>" for x in ws.left_out[:50]
        )
        parts.append(f"<h2>Left out</h2><ul>{items}</ul>")
    parts.append(_test("tests before", out.get("test_before")))
    parts.append(_test("tests after", out.get("test_after")))
    if out.get("summary"):
        parts.append(f'<h2>Summary</h2><pre class="summary">{esc(out["summary"])}</pre>')
    failure = out.get("failure")
    if isinstance(failure, Mapping):
        parts.append(
            f'<p class="bad">failure: {esc(failure.get("code"))}: {esc(failure.get("message"))}</p>'
        )
    files = out.get("files") or []
    if files:
        items = "".join(
            f'<li><code>{esc(f.get("status"))}</code> <span class="file">'
            f"{esc(f.get('path'))}</span></li>"
            for f in files[:500]
        )
        parts.append(f'<h2>Files</h2><ul class="files">{items}</ul>')
    diff = str(out.get("diff") or "")
    if diff:
        other = "unified" if view == "split" else "split"
        parts.append(
            f'<h2>Diff</h2><p><a href="/code/{esc(ws.id)}?view={other}" '
            f'hx-get="/code/{esc(ws.id)}/diff?view={other}" hx-target="#diff" '
            f'hx-swap="innerHTML" id="view-toggle">{other}</a></p>'
            f'<div id="diff">{diff_html(diff, view)}</div>'
        )
        if out.get("diff_truncated"):
            parts.append(f"<p>[diff cut at its first {len(diff)} characters]</p>")
    if ws.state in ("done", "failed") and files:
        parts.append(
            button_form(f"/code/{ws.id}/apply", "apply", csrf, cls="ok")
            + button_form(f"/code/{ws.id}/discard", "discard", csrf, cls="danger")
        )
    elif ws.shown_state not in ("running", "applied"):
        parts.append(button_form(f"/code/{ws.id}/discard", "discard", csrf, cls="danger"))
    return "".join(parts)


def models(config: Config, installable_states: Mapping[str, str], csrf: str) -> str:
    """The models page's body: the catalog with the default marked, the external agents
    configured, and the agents that can be installed (one form each)."""
    from jarvisd.catalog import model_status, strongest_model

    engine = config.engine
    if engine.model or engine.llamacpp.model:
        default, why = engine.model or engine.llamacpp.model, "configured"
    else:
        choice = strongest_model()
        default, why = choice.name, choice.reason
    rows = "".join(
        f"<tr><td>{'*' if s.entry.name == default else ''}</td><td>{esc(s.entry.name)}</td>"
        f"<td>{s.entry.size / 1e6:.0f} MB</td><td>{'present' if s.verified else 'not pulled'}"
        f"</td><td>{esc(s.entry.description)}</td></tr>"
        for s in model_status()
    )
    agents = "".join(f"<li>{esc(name)}</li>" for name in sorted(config.agents.external))
    installable = "".join(
        f"<tr><td>{esc(name)}</td><td>{esc(state)}</td><td>"
        + button_form(f"/models/agents/{name}/install", "install", csrf, cls="ok")
        + "</td></tr>"
        for name, state in sorted(installable_states.items())
    )
    return (
        f"<p>engine: {esc(engine.default)}; default model <strong>{esc(default)}</strong>"
        f" ({esc(why)})</p><table><tr><th></th><th>model</th><th>size</th><th>state</th>"
        f"<th></th></tr>{rows}</table><h2>External agents configured</h2>"
        f"<ul>{agents or '<li>none</li>'}</ul><h2>Installable agents</h2>"
        f'<table class="agents">{installable}</table>'
    )


def benchmarks(results: Path) -> str:
    """The benchmarks page's body: one bar chart per results file (at most 30, each
    under 2 MB; a file that does not read as results is left out)."""
    charts = []
    for path in sorted(results.glob("*.json"))[:30] if results.is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            if path.stat().st_size > 2_000_000:
                continue
            data = json.loads(path.read_text())
            rows = data.get("rows") if isinstance(data, dict) else None
            if not isinstance(rows, list):
                continue
            bars_in = [
                (
                    str(r.get("name", "")),
                    float(r["ours"]),
                    str(r.get("unit", "")),
                    r.get("passed") if isinstance(r.get("passed"), bool) else None,
                )
                for r in rows
                if isinstance(r, dict) and isinstance(r.get("ours"), int | float)
            ]
            when_ = (data.get("meta") or {}).get("when", "")
            charts.append(bars(f"{path.stem} ({when_})", bars_in))
    return "".join(f'<div class="chart">{c}</div>' for c in charts) or "<p>no results</p>"
