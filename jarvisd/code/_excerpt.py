"""The part of a long source file that a task and a test failure point at.

A small model reads every token it is given before it answers, on the user's CPU: a
whole 11 KB module costs it about 3,000 tokens (a minute and more on two cores) and
hides the ten lines that matter. So a file longer than :data:`WHOLE_FILE_BYTES` is
shown as the definitions (functions, methods, classes) that the texts name (any word
of the task, the first text; what the others, the tests' output, call), or by a line a
traceback cites (a cited line outside them with the lines around it),
each with its line numbers. A file that names none of
them, or that does not parse, is shown whole, as before.
"""

from __future__ import annotations

import ast
import re

from jarvisd._pysource import parse_module

__all__ = ["WHOLE_FILE_BYTES", "excerpt"]

#: A file up to this many bytes is shown whole: its definitions would save little.
WHOLE_FILE_BYTES = 3000
#: Lines shown on each side of a cited line that no named definition holds.
AROUND = 3

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CALLED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\(")
_Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _cited_lines(rel: str, texts: list[str]) -> set[int]:
    """The line numbers of ``rel`` that tracebacks in ``texts`` cite: pytest's
    ``path:LINE`` and Python's ``File "path", line LINE``."""
    name = re.escape(rel)
    cited = re.compile(rf'{name}(?::(\d+)|", line (\d+))')
    return {int(a or b) for text in texts for a, b in cited.findall(text)}


def _names_a_method(node: ast.ClassDef, words: set[str], lines: set[int]) -> bool:
    """Whether ``words`` name, or ``lines`` cite, one of the class's own methods."""
    return any(
        isinstance(child, _Def)
        and not isinstance(child, ast.ClassDef)
        and (
            child.name in words
            or any(child.lineno <= n <= (child.end_lineno or child.lineno) for n in lines)
        )
        for child in node.body
    )


def _spans(
    tree: ast.Module, words: set[str], lines: set[int], called: list[set[str]]
) -> list[tuple[int, int, int]]:
    """The (first, last, worth) lines of the definitions named by ``words`` or holding
    one of ``lines``, decorators included; a span inside another chosen span is left
    out (spans that overlap are one, worth the more of them). ``worth`` counts the
    reasons to show it: it holds a cited line, and each set of ``called`` (what the
    task calls, what the tests' output calls) that names it; a word alone is 0."""
    chosen = []
    for node in ast.walk(tree):
        if not isinstance(node, _Def) or node.end_lineno is None:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        # A class is chosen by its name only: a cited line picks the method within it.
        holds = not isinstance(node, ast.ClassDef) and any(
            first <= n <= node.end_lineno for n in lines
        )
        worth = holds + sum(node.name in names for names in called)
        if (
            isinstance(node, ast.ClassDef)
            and node.name in words
            and _names_a_method(node, words, lines)
        ):
            # ``Version.parse(`` names the class and its method: the method is shown
            # (the walk reaches it), of the class only its first line, not all of it.
            chosen.append((first, node.lineno, 1))
        elif node.name in words or holds:
            chosen.append((first, node.end_lineno, worth))
    # A cited line outside every chosen definition (module-level code that raised at
    # import) is shown with the lines around it.
    for n in lines:
        if not any(first <= n <= last for first, last, _ in chosen):
            chosen.append((max(1, n - AROUND), n + AROUND, 1))
    chosen.sort(key=lambda span: (span[0], -span[1]))
    spans: list[tuple[int, int, int]] = []
    for first, last, worth in chosen:
        if spans and first <= spans[-1][1]:
            a, b, w = spans[-1]
            spans[-1] = (a, max(b, last), max(w, worth))
        else:
            spans.append((first, last, worth))
    return spans


def _fitted(
    spans: list[tuple[int, int, int]], lines: list[str], limit: int | None
) -> list[tuple[int, int, int]]:
    """Of ``spans``, those that fit in ``limit`` bytes, the worthiest first, then the
    shortest (semver's 13-line bump_minor() before its 83-line next_version()); the
    first one always, however long. Returned in line order."""
    if limit is None:
        return spans
    if any(worth for _, _, worth in spans):
        # A word of the task alone ("patch", "large") names many definitions that only
        # share it: shown only when nothing has a better reason to be.
        spans = [span for span in spans if span[2]]
    kept: list[tuple[int, int, int]] = []
    used = 0
    for span in sorted(spans, key=lambda s: (-s[2], s[1] - s[0], s[0])):
        first, last, _ = span
        size = sum(len(line.encode()) + 1 for line in lines[first - 1 : last]) + 20
        if kept and used + size > limit:
            continue
        kept.append(span)
        used += size
    return sorted(kept)


def excerpt(rel: str, text: str, texts: list[str], limit: int | None = None) -> str:
    """``text`` (the file ``rel``) as it is put in front of the agent: whole when it is
    short or nothing in ``texts`` names a definition in it, else those definitions,
    each headed by its line numbers; with ``limit``, those that fit in about that many
    bytes, the ones with the most reasons to be shown first (cited, called)."""
    if len(text.encode()) <= WHOLE_FILE_BYTES:
        return text
    tree = parse_module(text)
    if tree is None:
        return text  # the agent writes these files: unparsable ones are shown whole
    # The task's every word names; of the tests' output (a whole suite's: hundreds of
    # words) only what it calls, ``name(`` and ``obj.name(``.
    words = {w for t in texts[:1] for w in _WORD.findall(t)}
    words |= {w for t in texts[1:] for w in _CALLED.findall(t)}
    called = [{w for w in _CALLED.findall(t)} for t in (texts[0], "\n".join(texts[1:]))]
    spans = _spans(tree, words, _cited_lines(rel, texts), called)
    if not spans:
        return text
    lines = text.splitlines()
    fitted = _fitted(spans, lines, limit)
    left_out = "" if len(fitted) == len(spans) else f"; {len(spans) - len(fitted)} more left out"
    parts = [f"[{len(lines)} lines; only the definitions named above are shown{left_out}]"]
    for first, last, _ in fitted:
        last = min(last, len(lines))
        parts.append(f"[lines {first}-{last}]")
        parts.extend(lines[first - 1 : last])
    return "\n".join(parts)
