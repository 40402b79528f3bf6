"""HTML made on the server: every value that came from a model, an agent, a file or a
request goes through :func:`esc` (control characters made visible, then HTML-escaped),
so ``<script>``, ``onerror=`` and terminal escape sequences arrive as text. Links are
only ever made to our own paths, never from a model's URL."""

from __future__ import annotations

import html
import re
import time
from typing import Any

__all__ = ["esc", "page", "when"]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
MAX_TEXT = 200_000


def _visible(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def esc(value: Any, limit: int = MAX_TEXT) -> str:
    """``value`` as inert HTML text (attribute-safe too), cut at ``limit`` characters."""
    text = str(value)
    if len(text) > limit:
        text = text[:limit] + f" [cut at {limit} characters]"
    return html.escape(_CONTROL.sub(_visible, text), quote=True)


def when(ts: float | None) -> str:
    return "-" if not ts else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


_NAV = (
    ("/tasks", "Tasks"),
    ("/code", "Code"),
    ("/models", "Models and agents"),
    ("/benchmarks", "Benchmarks"),
)


def page(title: str, body: str, *, csrf: str = "", sse: str = "", htmx: bool = False) -> bytes:
    """A whole page: our own stylesheet and scripts only (the CSP allows nothing else).
    htmx only where a page uses it: setting it up on a list of 1,000 tasks costs more
    than the rest of the page's load."""
    nav = "".join(f'<a href="{href}">{name}</a>' for href, name in _NAV)
    stream = f' data-sse="{esc(sse)}"' if sse else ""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)} - jarvis</title>"
        '<meta name="htmx-config" content=\'{"includeIndicatorStyles":false,'
        '"allowEval":false,"allowScriptTags":false,"selfRequestsOnly":true}\'>'
        f'<meta name="csrf" content="{esc(csrf)}">'
        '<link rel="stylesheet" href="/static/console.css">'
        + ('<script defer src="/static/htmx-2.0.4.min.js"></script>' if htmx else "")
        + '<script defer src="/static/console.js"></script>'
        f"</head><body{stream}><nav><strong>jarvis</strong>{nav}</nav>"
        f"<main><h1>{esc(title)}</h1>{body}</main></body></html>\n"
    ).encode()


def csrf_field(token: str) -> str:
    return f'<input type="hidden" name="csrf" value="{esc(token)}">'


def button_form(action: str, label: str, csrf: str, extra: str = "", cls: str = "") -> str:
    """A POST form of one button (works without JavaScript)."""
    return (
        f'<form method="post" action="{esc(action)}" class="inline">{csrf_field(csrf)}'
        f'{extra}<button type="submit" class="{esc(cls)}">{esc(label)}</button></form>'
    )
