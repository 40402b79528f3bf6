"""What of an external agent's streamed text is its answer.

An agent streams everything it says in one turn as message chunks: its narration
before a tool call ("Let me read the file"), notices of its own (codex's "Model
metadata ... not found" warning), and, last, the answer. The user saw it all as it
streamed; the run's answer is only the text after the agent's last tool call, without
the harness text some agents' prompts make a small model echo (opencode's
``<system-reminder>`` blocks).
"""

from __future__ import annotations

import re

__all__ = ["clean_answer", "strip_notice"]

#: Harness text an agent's model may echo into its reply, and a notice an agent may
#: stream as if it were the model's (codex, for a model it has no metadata for: jarvis
#: writes that metadata, this is the fallback for an agent version that ignores it).
_NOTICE = re.compile(r"Model metadata for `[^`\n]{0,200}` not found\.[^\n]*?issues\.\s*")
_NOISE = (re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL), _NOTICE)


def strip_notice(text: str) -> str:
    """``text`` (one streamed chunk) without the agent's own notice: never shown as
    the model's words (codex sends it as one chunk, before the reply)."""
    return _NOTICE.sub("", text)


def clean_answer(text: str) -> str:
    """``text`` (what the agent streamed after its last tool call) without the echoed
    harness text and notices, trimmed."""
    for pattern in _NOISE:
        text = pattern.sub("", text)
    return text.strip()
