"""Tool arguments as local models really write them: parse, repair, validate.

Repairs (each one seen from small models): code fences around the JSON, Python literals
(single quotes, True/None), trailing commas, JSON double-encoded as a string, arguments
wrapped in ``{"arguments": {...}}``, a bare value for a tool with one required
parameter, numbers given as strings and the reverse, the tool's own schema keywords
copied in beside the values (``"required": ["a", "b"]``). Whatever cannot be repaired gets a
message that tells the model exactly what to send instead.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ArgumentChecker", "ArgumentError", "parse_arguments", "validate_arguments"]

_FENCE = re.compile(r"^\s*```[a-zA-Z_]*\s*\n?(.*?)\n?```\s*$", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


class ArgumentError(ValueError):
    """The arguments cannot be used; the message is written for the model."""


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        pass
    fixed = _TRAILING_COMMA.sub(r"\1", text)
    try:
        return json.loads(fixed)
    except ValueError:
        pass
    try:  # {'a': 1, 'b': True}: a Python literal
        return ast.literal_eval(fixed)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        raise ArgumentError("not valid JSON") from None


_DECODER = json.JSONDecoder()
_WRAPPERS = frozenset(("arguments", "parameters", "args", "input"))


#: raw_decode's scanner, called without its Python wrapper (every call is read here).
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def _required(schema: Mapping[str, object]) -> list[str]:
    req = schema.get("required")
    return [r for r in req if isinstance(r, str)] if isinstance(req, list | tuple) else []


def _properties(schema: Mapping[str, object]) -> Mapping[str, object]:
    props = schema.get("properties")
    return props if isinstance(props, Mapping) else {}


def _sole_parameter(schema: Mapping[str, object]) -> str | None:
    props = _properties(schema)
    required = _required(schema)
    if len(required) == 1:
        return required[0]
    if len(props) == 1:
        return str(next(iter(props)))
    return None


def parse_arguments(
    text: str | Mapping[str, object] | None, schema: Mapping[str, object]
) -> dict[str, object]:
    """The arguments object for ``schema``, repaired when possible."""
    if text is None:
        return {}
    fast: object = None
    if type(text) is str and text.startswith("{"):
        # The well-formed object, the usual case, read by the scanner in one step.
        try:
            fast, end = _SCAN(text, 0)
        except (StopIteration, ValueError):
            fast = None
        else:
            if type(fast) is not dict or (end != len(text) and text[end:].strip()):
                fast = None
    if fast is not None:
        value: object = fast
    elif not isinstance(text, str):
        value = dict(text)
    else:
        raw = text.strip()
        if not raw:
            return {}
        fence = _FENCE.match(raw)
        if fence:
            raw = fence.group(1).strip()
        try:
            value = _loads(raw)
        except ArgumentError:
            sole = _sole_parameter(schema)
            if sole is None:
                raise ArgumentError(
                    f"arguments are not a JSON object: {_clip(raw)!r}; send an object like "
                    f"{_example(schema)}"
                ) from None
            value = {sole: raw.strip().strip("\"'")}
    # JSON double-encoded as a string: '"{\"expression\": \"1+1\"}"'
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            inner = json.loads(value)
        except ValueError:
            inner = None
        if isinstance(inner, dict):
            value = inner
    if isinstance(value, dict):
        if len(value) == 1:  # {"arguments": {...}}: a wrapper the model added
            key = next(iter(value))
            wrapped = value[key]
            if key in _WRAPPERS and isinstance(wrapped, dict) and key not in _properties(schema):
                return wrapped
        return value
    sole = _sole_parameter(schema)
    if sole is not None and isinstance(value, str | int | float | bool):
        return {sole: value}
    raise ArgumentError(
        f"arguments must be a JSON object, got {type(value).__name__}; send {_example(schema)}"
    )


#: JSON schema keywords a small model copies from a tool's schema into its arguments.
_SCHEMA_KEYWORDS = frozenset(
    ("required", "properties", "additionalProperties", "$schema", "definitions")
)

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list, tuple),
}


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def _coerce(name: str, value: object, wanted: str) -> object:
    types = _TYPES.get(wanted)
    if types is None or type(value) in types:  # exact type: a bool is no integer here
        return value
    if isinstance(value, bool) and wanted in ("integer", "number"):
        raise ArgumentError(f"parameter {name!r} must be {_a(wanted)}, got a boolean")
    if isinstance(value, types):
        return value
    if wanted == "string" and isinstance(value, int | float):
        return str(value)
    if wanted in ("integer", "number") and isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ArgumentError(f"parameter {name!r} must be {_a(wanted)}, got {value!r}") from None
        if wanted == "integer":
            if not number.is_integer():
                raise ArgumentError(f"parameter {name!r} must be an integer, got {value!r}")
            return int(number)
        return number
    if wanted == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if wanted == "boolean" and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ArgumentError(f"parameter {name!r} must be {_a(wanted)}, got {type(value).__name__}")


def validate_arguments(
    params: Mapping[str, object], schema: Mapping[str, object]
) -> dict[str, object]:
    """Check ``params`` against the (flat) JSON schema; returns coerced values."""
    return ArgumentChecker(schema)(params)


class ArgumentChecker:
    """:func:`validate_arguments` for one schema, which it reads once: the dispatcher
    checks every call of a tool against the same schema, and reading it (its required
    names, each property's type and choices) cost more than checking a call."""

    __slots__ = ("_closed", "_enums", "_props", "_required", "_schema", "_types")

    def __init__(self, schema: Mapping[str, object]) -> None:
        self._schema = schema
        self._props = props = _properties(schema)
        self._required = tuple(_required(schema))
        self._types: dict[object, str] = {}
        self._enums: dict[object, list[object] | tuple[object, ...]] = {}
        for key, prop in props.items():
            if not isinstance(prop, Mapping):
                continue
            wanted = prop.get("type")
            if isinstance(wanted, str):
                self._types[key] = wanted
            enum = prop.get("enum")
            if isinstance(enum, list | tuple):
                self._enums[key] = enum
        self._closed = schema.get("additionalProperties", True) is False

    def __call__(self, params: Mapping[str, object]) -> dict[str, object]:
        for name in self._required:
            if name not in params:
                missing = [r for r in self._required if r not in params]
                raise ArgumentError(
                    f"missing required parameter(s) {', '.join(map(repr, missing))}; "
                    f"send {_example(self._schema)}"
                )
        props, types, enums = self._props, self._types, self._enums
        out: dict[str, object] = {}
        for key, value in params.items():
            if props.get(key) is None:
                if props and key in _SCHEMA_KEYWORDS:
                    # The schema's own words copied into the call (``"required": [...]``,
                    # seen from 0.5B models): not a value the tool declares, and one a
                    # Python function would fail on.
                    continue
                if self._closed:
                    known = ", ".join(props) or "none"
                    raise ArgumentError(f"unknown parameter {key!r} (parameters: {known})")
                out[key] = value
                continue
            wanted = types.get(key)
            if wanted is not None and type(value) not in _TYPES.get(wanted, (type(value),)):
                value = _coerce(key, value, wanted)  # not already of its exact type
            enum = enums.get(key)
            if enum is not None and value not in enum:
                raise ArgumentError(f"parameter {key!r} must be one of {list(enum)}, got {value!r}")
            out[key] = value
        return out


def _example(schema: Mapping[str, object]) -> str:
    props = _properties(schema)
    sample = {
        k: f"<{v.get('type', 'value') if isinstance(v, Mapping) else 'value'}>"
        for k, v in props.items()
    }
    return json.dumps(sample)


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
