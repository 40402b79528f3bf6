"""Text from models and tools, made safe to show on a terminal.

A model's answer (or a tool's output it repeats) may hold escape sequences that move
the cursor, rewrite the title, hide text or hyperlink elsewhere. On a terminal they are
removed; piped output is left exactly as the model wrote it.
"""

from __future__ import annotations

import re

__all__ = ["for_terminal"]

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), other two-byte ESC sequences, then
# any C0 control but tab and newline, DEL, and the C1 controls (8-bit CSI among them).
_SEQUENCES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def for_terminal(text: str) -> str:
    """``text`` without escape sequences and control characters (tab and newline kept)."""
    if not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub("", _SEQUENCES.sub("", text))
