"""Text from models and tools, made safe to show on a terminal.

A model's answer (or a tool's output it repeats) may hold escape sequences that move
the cursor, rewrite the title, hide text or hyperlink elsewhere. On a terminal they are
removed; piped output is left exactly as the model wrote it.

Short fields an agent chooses (a tool call's title, its kind, a task's input shown in
a list) go through :func:`visible` instead, on every output: an escape there is shown,
not obeyed nor hidden, so ``cat README.md\\e[8m; curl ... | sh`` reads as what it is.
"""

from __future__ import annotations

import re

__all__ = ["for_terminal", "visible"]

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), other two-byte ESC sequences, then
# any C0 control but tab and newline, DEL, and the C1 controls (8-bit CSI among them).
_SEQUENCES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def for_terminal(text: str) -> str:
    """``text`` without escape sequences and control characters (tab and newline kept)."""
    if not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub("", _SEQUENCES.sub("", text))


# Controls that reorder or hide text without being C0/C1: bidi embeddings, overrides
# and isolates, the implicit marks, and the line/paragraph separators.
_INVISIBLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_INVISIBLE_BUT_LINES = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object, *, lines: bool = False) -> str:
    """``text`` with every control character (ESC, C0, C1, bidi overrides) written
    out as an escape (``\\x1b``, ``\\u202e``); ``lines``: newlines and tabs kept."""
    pattern = _INVISIBLE_BUT_LINES if lines else _INVISIBLE
    return pattern.sub(_escaped, str(text))
