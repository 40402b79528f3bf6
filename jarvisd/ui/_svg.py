"""SVG drawn on the server: a trace's sequence diagram (from the mermaid text that
``jarvisd.traces.to_mermaid`` makes, whose labels it has already cleaned) and bar
charts of benchmark rows. Every label is escaped again here: SVG is markup too."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._html import esc

__all__ = ["bars", "sequence"]

_PARTICIPANT = re.compile(r"^\s*participant (\S+) as (.*)$")
_ARROW = re.compile(r"^\s*(\S+?)(-->>|->>|-\)|--\)|-x|--x)(\S+?): (.*)$")
_NOTE = re.compile(r"^\s*Note over (\S+): (.*)$")
COL = 170
ROW = 34
MAX_ROWS = 500


def sequence(mermaid: str) -> str:
    """The diagram as an <svg> element."""
    names: dict[str, str] = {}
    steps: list[tuple[str, str, str, str]] = []  # kind, from, to, label
    for line in mermaid.splitlines():
        if m := _PARTICIPANT.match(line):
            names[m.group(1)] = m.group(2)
        elif m := _ARROW.match(line):
            steps.append(
                (
                    "reply" if m.group(2).startswith("--") else "call",
                    m.group(1),
                    m.group(3),
                    m.group(4),
                )
            )
        elif m := _NOTE.match(line):
            steps.append(("note", m.group(1), m.group(1), m.group(2)))
    steps = steps[:MAX_ROWS]
    order = {pid: i for i, pid in enumerate(names)}
    width = max(1, len(names)) * COL
    height = 70 + (len(steps) + 1) * ROW
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="sequence" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img">'
    ]
    for pid, i in order.items():
        x = i * COL + COL // 2
        out.append(
            f'<rect x="{x - 75}" y="8" width="150" height="30" class="actor"/>'
            f'<text x="{x}" y="28" text-anchor="middle">{esc(names[pid])}</text>'
            f'<line x1="{x}" y1="38" x2="{x}" y2="{height - 5}" class="life"/>'
        )
    for n, (kind, src, dst, label) in enumerate(steps):
        y = 70 + n * ROW
        x1 = order.get(src, 0) * COL + COL // 2
        x2 = order.get(dst, 0) * COL + COL // 2
        if kind == "note":
            out.append(
                f'<rect x="{x1 - 80}" y="{y - 16}" width="160" height="22" class="note"/>'
                f'<text x="{x1}" y="{y}" text-anchor="middle">{esc(label)}</text>'
            )
            continue
        dash = ' stroke-dasharray="5,4"' if kind == "reply" else ""
        tip = 6 if x2 >= x1 else -6
        out.append(
            f'<line x1="{x1}" y1="{y}" x2="{x2}" y2="{y}" class="msg"{dash}/>'
            f'<path d="M{x2} {y} l{-tip} -4 l0 8 z" class="tip"/>'
            f'<text x="{(x1 + x2) // 2}" y="{y - 5}" text-anchor="middle">{esc(label)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def bars(title: str, rows: Sequence[tuple[str, float, str, bool | None]]) -> str:
    """A horizontal bar chart: (label, value, unit, passed) per bar, scaled per chart."""
    rows = list(rows)[:60]
    top = max((abs(v) for _, v, _, _ in rows), default=1.0) or 1.0
    height = 30 + len(rows) * 22
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="760" '
        f'height="{height}" role="img"><text x="4" y="16" class="title">{esc(title)}</text>'
    ]
    for i, (label, value, unit, passed) in enumerate(rows):
        y = 26 + i * 22
        w = max(1, int(360 * abs(value) / top))
        cls = "ok" if passed else ("bad" if passed is False else "bar")
        out.append(
            f'<text x="4" y="{y + 13}">{esc(label, 48)}</text>'
            f'<rect x="300" y="{y}" width="{w}" height="16" class="{cls}"/>'
            f'<text x="{306 + w}" y="{y + 13}">{value:.4g} {esc(unit)}</text>'
        )
    out.append("</svg>")
    return "".join(out)
