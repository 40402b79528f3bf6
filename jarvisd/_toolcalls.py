"""Recovering tool calls that local models write into their text.

Small models often pick the right tool and arguments but write the call as a fenced
JSON block, inside ``<tool_call>`` tags, or as bare JSON, leaving the structured
``tool_calls`` empty. This module finds such calls. Only names of tools that were
offered count, so ordinary JSON in an answer is not mistaken for a call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator

from ._messages import ToolCall

__all__ = ["calls_end", "extract_json_objects", "recover_tool_calls", "starts_like_a_call"]

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL | re.IGNORECASE)
_FENCED = re.compile(r"```(?:json|tool_call|tool)?\s*\n?(.*?)```", re.DOTALL | re.IGNORECASE)


_CALL_START = re.compile(
    r'^\s*(?:<tool_call>\s*|```(?:json|tool_call|tool)?\s*)?\{\s*"(?:name|function|tool|tool_name)"\s*:',
    re.IGNORECASE,
)


def starts_like_a_call(text: str) -> bool:
    """Whether ``text`` opens like a tool call written as JSON (``{"name": ...``, fenced
    or tagged or bare): what a reply cut off in the middle of a call looks like. Such
    text is never an answer."""
    return _CALL_START.match(text) is not None


def extract_json_objects(text: str) -> Iterator[tuple[int, int, object]]:
    """Yield (start, end, value) for every top-level JSON object or array in ``text``."""
    decoder = json.JSONDecoder()
    index = 0
    while index < len(text):
        match = re.search(r"[\[{]", text[index:])
        if match is None:
            return
        start = index + match.start()
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            index = start + 1
            continue
        yield start, end, value
        index = end


def _as_call(value: object, names: Collection[str]) -> ToolCall | None:
    if not isinstance(value, dict):
        return None
    if "function" in value and isinstance(value["function"], dict):
        value = value["function"]
    name = value.get("name") or value.get("tool") or value.get("tool_name")
    if not isinstance(name, str):
        return None
    matched = _match_name(name, names)
    if matched is None:
        return None
    arguments = value.get("arguments", value.get("parameters", value.get("args", {})))
    if isinstance(arguments, str):
        return ToolCall(name=matched, arguments=arguments)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    return ToolCall.from_arguments(matched, arguments)


def _match_name(name: str, names: Collection[str]) -> str | None:
    if name in names:
        return name
    lowered = {n.lower(): n for n in names}
    return lowered.get(name.strip().lower())


def _calls_in(value: object, names: Collection[str]) -> list[ToolCall]:
    items = value if isinstance(value, list) else [value]
    calls = [_as_call(item, names) for item in items]
    return [c for c in calls if c is not None]


def recover_tool_calls(text: str, names: Collection[str]) -> tuple[list[ToolCall], str]:
    """Find tool calls for the tools in ``names`` written into ``text``.

    Returns the calls and the text with them removed. Tagged calls win over fenced
    blocks, which win over bare JSON, so one call is never counted twice.
    """
    if not names or "{" not in text:  # every form below carries a JSON object
        return [], text
    for pattern in (_TAGGED, _FENCED):
        calls: list[ToolCall] = []
        spans: list[tuple[int, int]] = []
        for match in pattern.finditer(text):
            found = [
                c for _, _, v in extract_json_objects(match.group(1)) for c in _calls_in(v, names)
            ]
            if found:
                calls.extend(found)
                spans.append(match.span())
        if calls:
            return calls, _cut(text, spans)
    calls, spans = [], []
    for start, end, value in extract_json_objects(text):
        found = _calls_in(value, names)
        if found:
            calls.extend(found)
            spans.append((start, end))
    return calls, _cut(text, spans)


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    for start, end in reversed(spans):
        text = text[:start] + text[end:]
    return text.strip()


# -- where a reply that calls tools is complete --------------------------------------

#: What may stand between calls of one block: whitespace, tags, fences, an array's
#: brackets and commas, and the braces of calls that Qwen2.5 at times writes doubled,
#: ``{{"name": ...}}``.
_GLUE = re.compile(
    r"(?:\s+|</?tool_call>|```(?:json|tool_call|tool)?|[,\[\]}]|\{(?=\{))*", re.IGNORECASE
)
#: What closes the block after a call: whitespace, a closing tag or fence, a bracket.
_CLOSERS = re.compile(r"(?:\s+|</tool_call>|```(?![A-Za-z_])|[\]}])*", re.IGNORECASE)
_GLUE_WORDS = ("<tool_call>", "</tool_call>", "```json", "```tool_call")


def _key(call: ToolCall) -> tuple[str, str]:
    return call.name, " ".join(call.arguments.split())


def calls_end(text: str, names: Collection[str]) -> int | None:
    """Where a reply that begins with ``text`` can be cut because its tool calls are
    complete, or None while it must go on.

    The reply is complete once it holds a call (fenced, tagged or bare JSON, as
    :func:`recover_tool_calls` reads them) and what follows the last call can no longer
    be another one of the same block: prose, JSON that is not a call, or a repeat of a
    call already read (small models write one call a dozen times). Until then more
    calls may follow, so that several calls opened in one block (a JSON array, tagged
    calls one after another) all run. The cut keeps the closing tag or fence of the
    last call and drops what follows it.
    """
    if not names or "}" not in text:  # a complete call ends with a brace
        return None
    seen: set[tuple[str, str]] = set()
    last: int | None = None  # end of the last call read
    for start, end, value in extract_json_objects(text):
        calls = _calls_in(value, names)
        if last is None:
            if calls:
                seen.update(map(_key, calls))
                last = end
            continue  # JSON before the first call is prose
        glue_end = _GLUE.match(text, last).end()  # type: ignore[union-attr]
        if start > glue_end:
            # Something other than glue follows the last call. A brace there opens a
            # value not complete yet (the one found is inside it): it may be a call.
            return None if text[glue_end] in "{[" else _closed(text, last)
        keys = set(map(_key, calls))
        if not calls or keys <= seen:
            return _closed(text, last)  # JSON that is not a call, or a repeat
        seen.update(keys)
        last = end
    if last is None:
        return None
    glue_end = _GLUE.match(text, last).end()  # type: ignore[union-attr]
    rest = text[glue_end:]
    if not rest or rest[0] in "{[":
        return None
    lowered = rest.lower()
    if any(len(lowered) < len(word) and word.startswith(lowered) for word in _GLUE_WORDS):
        return None  # "<tool_" may still become a tag that opens another call
    return _closed(text, last)


def _closed(text: str, end: int) -> int:
    return _CLOSERS.match(text, end).end()  # type: ignore[union-attr]
