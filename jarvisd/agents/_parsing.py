"""Reading what models write: ReAct lines, code blocks, final answers.

Markers are matched case-insensitively and tolerate markdown decoration
(``**Action:**``, ``### Final Answer``), which small models add freely.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ReActParse", "code_blocks", "final_answer", "parse_react", "tool_descriptions"]

_DECOR = r"[ \t>*#_`]*"
_MARK = re.compile(
    rf"^{_DECOR}(thought|action input|action|observation|final answer){_DECOR}\s*:{_DECOR}",
    re.IGNORECASE | re.MULTILINE,
)
_CODE = re.compile(r"```[ \t]*(python3?|py|repl)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ReActParse:
    thought: str = ""
    action: str | None = None
    action_input: str = ""
    final: str | None = None
    #: The text up to the end of the step the agent acts on (hallucinated
    #: observations after it are cut off).
    kept: str = ""


def parse_react(text: str) -> ReActParse:
    """Split ``text`` at its ReAct markers. The first Action wins over a Final Answer
    that comes after it (a model that writes both has not seen the observation yet)."""
    marks = list(_MARK.finditer(text))
    sections: list[tuple[str, str, int]] = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        sections.append((m.group(1).lower(), text[m.end() : end].strip(), end))
    thought = ""
    for idx, (kind, body, end) in enumerate(sections):
        if kind == "thought" and not thought:
            thought = body
        elif kind == "observation":
            break  # the model is inventing tool output: stop reading here
        elif kind == "final answer":
            return ReActParse(thought, None, "", body, text[:end].strip())
        elif kind == "action":
            name = body.splitlines()[0].strip().strip("`*\"' ") if body else ""
            action_input, stop = "", end
            if idx + 1 < len(sections) and sections[idx + 1][0] == "action input":
                action_input, stop = sections[idx + 1][1], sections[idx + 1][2]
            elif "\n" in body:
                action_input = body.split("\n", 1)[1].strip()
            if name.lower() in ("", "none", "n/a"):
                continue
            return ReActParse(thought, name, _strip_fence(action_input), None, text[:stop].strip())
    return ReActParse(thought=thought, kept=text.strip())


def _strip_fence(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        text = re.sub(r"^```[a-zA-Z]*\s*", "", text)
        text = re.sub(r"\s*```$", "", text)
    return text.strip()


def code_blocks(text: str, *, bare: bool = False) -> list[str]:
    """Python code in fenced blocks (```python, ```py, ```repl; with ``bare`` also
    fences without a language). An unclosed last fence counts: output cut by
    max_tokens still runs what is there."""
    found = []
    for m in _CODE.finditer(text):
        lang = m.group(1)
        if lang is None and not bare:
            continue
        code = m.group(2).strip("\n")
        if code.strip():
            found.append(code)
    return found


_FINAL_CALL = re.compile(r"(?<![\w.])FINAL\((.*)\)", re.DOTALL)
_FINAL_ANSWER = re.compile(
    rf"^{_DECOR}final answer{_DECOR}\s*:{_DECOR}(.*)", re.IGNORECASE | re.DOTALL | re.MULTILINE
)


def final_answer(text: str, *, final_call: bool = False) -> str | None:
    """``Final Answer: ...`` (and with ``final_call``, a ``FINAL(...)`` written as text)."""
    m = _FINAL_ANSWER.search(text)
    if m:
        return m.group(1).strip()
    if final_call:
        m = _FINAL_CALL.search(text)
        if m:
            return m.group(1).strip().strip("\"'")
    return None


def tool_descriptions(specs: object) -> str:
    """One line per tool: name, description, arguments."""
    lines = []
    for spec in specs:  # type: ignore[attr-defined]
        props = spec.parameters.get("properties") or {}
        required = set(spec.parameters.get("required") or ())
        args = ", ".join(
            f"{k} ({v.get('type', 'any')}{'' if k in required else ', optional'})"
            for k, v in props.items()
        )
        lines.append(f"- {spec.name}: {spec.description} Arguments: {args or 'none'}.")
    return "\n".join(lines)
