"""Reading what an agent says it did: a summary that claims a change, a task that asks
for none. Heuristics on English text, kept small and tested by example: a claim is a
change verb ("fixed", "I changed", "updated") not governed by a negation or a modal
("did not change", "should be changed", "unable to fix").

``jarvis code`` holds a summary to its diff with them (``no_change``), and CodeAct
re-asks once a reply that claims work when no code ran.
"""

from __future__ import annotations

import re

__all__ = ["asks_no_change", "claims_change"]

#: A change claimed in the past tense ("changed", "fixed", "rewrote", "made the fix"):
#: a summary's way of saying it; a bare "add" or "fix" names as often as it claims.
_CLAIM = re.compile(
    r"\b(?:chang|fix|modifi|updat|replac|edit|add|remov|renam|implement|correct|refactor|"
    r"adjust|patch|delet|insert|creat)e?d\b|\b(?:re)?wr(?:ote|itten)\b"
    r"|\bmade (?:the |a |some |these )?(?:changes?|fix(?:es)?|edits?)\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(
    r"\b(?:not|no|never|nothing|without|n't|cannot|can't|couldn't|didn't|unable|needs? to|"
    r"should|must|would|could|please|to)\s+(?:\w+\s+){0,2}$",
    re.IGNORECASE,
)
#: "changed nothing", "modified no file": a claim of no change.
_NOTHING = re.compile(r"\s+(?:nothing|no|none|neither)\b", re.IGNORECASE)
_NO_CHANGE_TASK = re.compile(
    r"\b(?:do not|don't|without|never)\s+(?:\w+\s+){0,2}(?:change|modify|edit|touch|writ)"
    r"|\bno (?:code )?changes?\b|\bread[- ]only\b"
    r"|^\s*(?:explain|describe|review|summari[sz]e|list|tell|what|why|how|where|which|is|are|does)\b",
    re.IGNORECASE,
)


def claims_change(summary: str) -> bool:
    """Whether the agent's summary says it changed something ("I fixed...", "Changed
    the function..."), not counting what it says it did not or could not do."""
    for match in _CLAIM.finditer(summary):
        before = summary[max(0, match.start() - 40) : match.start()]
        if not _NEGATION.search(before) and not _NOTHING.match(summary, match.end()):
            return True
    return False


def asks_no_change(task: str) -> bool:
    """Whether the task asks for no change (a question, a review, "do not modify")."""
    return _NO_CHANGE_TASK.search(task) is not None
