"""Reading what models write: ReAct lines, code blocks, final answers.

Markers are matched case-insensitively and tolerate markdown decoration
(``**Action:**``, ``### Final Answer``), which small models add freely.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

__all__ = [
    "ReActParse",
    "code_blocks",
    "final_answer",
    "final_before_code",
    "final_before_code_so_far",
    "parse_react",
    "react_answer_so_far",
    "react_call_end",
    "tool_descriptions",
]

_DECODER = json.JSONDecoder()
_DECOR = r"[ \t>*#_`]*"
_MARKERS = ("thought", "action input", "action", "observation", "final answer")
_MARK = re.compile(
    rf"^{_DECOR}({'|'.join(_MARKERS)}){_DECOR}\s*:{_DECOR}", re.IGNORECASE | re.MULTILINE
)


def _beginnings(word: str) -> str:
    """A pattern matching every beginning of ``word``, the empty one too."""
    pattern = ""
    for char in reversed(word):
        pattern = f"(?:{re.escape(char)}{pattern})?"
    return pattern


#: Text from a line start to the end of what was read that may still become a marker
#: line (``_MARK``) as more text comes: decoration, then the beginning of a marker word,
#: or a whole word followed by what may still precede its colon.
_MAY_BECOME_MARK = re.compile(
    rf"{_DECOR}(?:(?:{'|'.join(_MARKERS)}){_DECOR}\s*|{'|'.join(map(_beginnings, _MARKERS))})\Z",
    re.IGNORECASE,
)
_BLANK = re.compile(r"[\s>*#_`]+")  # whitespace and decoration
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


def react_answer_so_far(text: str) -> str | None:
    """The final answer of a ReAct reply of which ``text`` is the beginning, as far as
    no continuation can change it; None while the reply may still be an action.

    :func:`parse_react` takes the first of ``Action:`` and ``Final Answer:``, and the
    answer runs to the next marker line. So once it reads a final answer in ``text``,
    the reply is one, and its answer grows as text comes, except where the end of
    ``text`` may still become a marker (or the marker's own decoration) or is
    whitespace that the answer's ``strip`` would drop.
    """
    if "answer" not in text.lower() or parse_react(text).final is None:
        return None
    marks = list(_MARK.finditer(text))
    at = next(i for i, m in enumerate(marks) if m.group(1).lower() == "final answer")
    start = marks[at].end()
    if at + 1 < len(marks):  # a later marker ends the answer: all of it is here
        return text[start : marks[at + 1].start()].strip()
    body = text[start:]  # empty while "Final Answer: *" may still be decoration
    cut, line = len(body), body.rfind("\n")
    while line >= 0:  # from the last line back: only the last few can qualify
        tail = body[line + 1 :]
        if len(_BLANK.sub("", tail)) > len("final answer"):
            break  # more text than any marker has: so has every earlier line's tail
        if _MAY_BECOME_MARK.match(tail):
            cut = line
        line = body.rfind("\n", 0, line)
    return body[:cut].strip()


def react_call_end(text: str) -> int | None:
    """Where a ReAct reply that begins with ``text`` can be cut because it holds its
    whole action, or None while it must go on. :func:`parse_react` runs the first
    action only, so the reply is complete once that action's input is: a JSON object
    closed (nothing after it can change the call), or a line of plain input ended."""
    if "input" not in text.lower():
        return None
    marks = list(_MARK.finditer(text))
    for i, m in enumerate(marks):
        kind = m.group(1).lower()
        if kind in ("observation", "final answer"):
            return None  # parse_react reads no action before these
        if kind != "action input" or i == 0 or marks[i - 1].group(1).lower() != "action":
            continue
        action = text[marks[i - 1].end() : m.start()].strip().strip("`*\"' ").lower()
        if action in ("", "none", "n/a"):
            continue
        body = m.end()
        while body < len(text) and text[body] in " \t`":
            body += 1
        if text.startswith("json", body):  # an opening ```json fence
            body += 4
        while body < len(text) and text[body].isspace():
            body += 1
        if body < len(text) and text[body] in "{[":
            try:
                _, end = _DECODER.raw_decode(text, body)
            except ValueError:
                return None  # not closed yet
            return end
        line_end = text.find("\n", body)
        return None if line_end < 0 or body == len(text) else line_end
    return None


def final_before_code(text: str) -> str | None:
    """The answer of a reply that writes ``Final Answer:`` before any code fence (code
    after it is part of the answer, such as the function the user asked for), else
    None. The first of ``Action:`` and ``Final Answer:`` wins, as in :func:`parse_react`."""
    final = parse_react(text).final
    if final is None or "```" in text[: _final_mark(text).start()]:
        return None
    return final


def final_before_code_so_far(text: str) -> str | None:
    """:func:`react_answer_so_far` for replies read by :func:`final_before_code`."""
    answer = react_answer_so_far(text)
    if answer is None or "```" in text[: _final_mark(text).start()]:
        return None
    return answer


def _final_mark(text: str) -> re.Match[str]:
    """The ``Final Answer:`` marker :func:`parse_react` reads (it read a final answer)."""
    return next(m for m in _MARK.finditer(text) if m.group(1).lower() == "final answer")


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
