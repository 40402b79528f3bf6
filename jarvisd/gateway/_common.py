"""What every dialect shares: the typed request it parses into, the one error it raises
for a bad request, the checked accessors it reads loose JSON with, and the SSE framing.

A dialect is a module of pure functions (no I/O): ``parse`` turns a request body into a
:class:`ChatRequest`, ``response`` a :class:`Generation` into a body, a ``Stream``
encoder turns chunks into server-sent events, and ``error`` gives the dialect's error
body. The gateway and ``jarvis serve-model`` both call them, so there is one copy.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .._errors import EngineResponseError, EngineUnavailable, ModelNotFound, ProtocolError
from .._messages import Generation, Message, SamplingOptions, ToolSpec
from .._runcontext import BudgetExceeded, Cancelled

__all__ = ["BadRequest", "ChatRequest", "Dialect", "StreamEncoder", "error_status"]

#: Deepest JSON the gateway accepts. Tool schemas nest a few levels; more is an attack
#: (and Python's own recursion would fail first, far more slowly).
MAX_DEPTH = 64

_DEFAULTS = SamplingOptions()


class BadRequest(ProtocolError):
    """The request cannot be served as sent: answered with ``status`` (400 unless a
    more precise one applies) in the dialect's error shape."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One inference request, whatever dialect it came in."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    options: SamplingOptions = _DEFAULTS
    stream: bool = False
    #: The model name the client asked for (only echoed; the run's model serves it).
    model: str = ""
    #: OpenAI chat: ``stream_options.include_usage`` (a last chunk with the usage).
    include_usage: bool = False


class StreamEncoder(Protocol):
    """Turns one streamed reply into the dialect's SSE bytes. ``start`` before the first
    delta, ``finish`` with the whole generation, ``fail`` instead of ``finish`` when the
    engine or the run stopped mid-stream."""

    def start(self) -> bytes: ...

    def delta(self, text: str) -> bytes: ...

    def finish(self, generation: Generation) -> bytes: ...

    def fail(self, status: int, message: str) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Dialect:
    """One vendor API's translate functions."""

    name: str
    parse: Callable[[object, int], ChatRequest]
    response: Callable[[Generation, ChatRequest, str], dict[str, Any]]
    stream: Callable[[ChatRequest, str], StreamEncoder]
    error: Callable[[int, str], dict[str, Any]]


def error_status(exc: BaseException) -> int:
    """The HTTP status for an error the engine or the run raised."""
    if isinstance(exc, BadRequest):
        return exc.status
    if isinstance(exc, ModelNotFound):
        return 404
    if isinstance(exc, EngineResponseError) and exc.status and 400 <= exc.status < 600:
        return exc.status
    if isinstance(exc, EngineUnavailable):
        return 503
    # Neither is worth a retry, and clients retry 408, 409, 429 and 5xx: 402 and 410
    # make an agent stop at once instead of backing off against a spent run.
    if isinstance(exc, BudgetExceeded):
        return 402
    if isinstance(exc, Cancelled):
        return 410
    return 500


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def sse(data: Mapping[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(data, ensure_ascii=False) + "\n\n").encode()


# -- checked access to loose JSON: every wrong type is a BadRequest naming the field ----


def loads(raw: bytes) -> object:
    """Parse a request body; anything but JSON (or JSON too deep) is a BadRequest."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise BadRequest("request body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if _depth(value) > MAX_DEPTH:
        raise BadRequest(f"request body is nested more than {MAX_DEPTH} levels deep")
    return value


def _depth(value: object) -> int:
    # Iterative: a recursive walk would itself overflow on the inputs it guards against.
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def obj(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be an object")
    return value


def opt_obj(value: object, what: str) -> dict[str, Any]:
    return {} if value is None else obj(value, what)


def array(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise BadRequest(f"{what} must be an array")
    return value


def opt_array(value: object, what: str) -> list[Any]:
    return [] if value is None else array(value, what)


def string(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise BadRequest(f"{what} must be a string")
    return value


def opt_string(value: object, what: str, default: str = "") -> str:
    return default if value is None else string(value, what)


def flag(value: object, what: str, default: bool = False) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"{what} must be true or false")
    return value


def count(value: object, what: str) -> int | None:
    """A positive integer (a token count), or None when absent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{what} must be an integer")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise BadRequest(f"{what} must be an integer")
    if value < 1:
        raise BadRequest(f"{what} must be at least 1")
    return int(value)


def number(value: object, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{what} must be a number")
    result = float(value)
    if not math.isfinite(result) or result < 0:
        raise BadRequest(f"{what} must be a finite number, at least 0")
    return result


def seed(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**63:
        raise BadRequest(f"{what} must be a 64-bit integer")
    return value


def stops(value: object, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    items = array(value, what)
    if not all(isinstance(s, str) for s in items):
        raise BadRequest(f"{what} must be a string or an array of strings")
    return tuple(items)


def options(
    default_max_tokens: int,
    *,
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    seed: int | None,
    stop: tuple[str, ...],
) -> SamplingOptions:
    """Sampling options; an unset temperature is 0.7, jarvis's default, not the vendor's."""
    return SamplingOptions(
        temperature=_DEFAULTS.temperature if temperature is None else temperature,
        max_tokens=max_tokens or default_max_tokens,
        top_p=top_p,
        seed=seed,
        stop=stop,
    )


def schema(value: object, what: str) -> dict[str, Any]:
    """A tool's JSON-schema parameters (an empty object schema when absent)."""
    if value is None:
        return {"type": "object", "properties": {}}
    return obj(value, what)


def tool_spec(item: Mapping[str, Any], where: str, schema_key: str = "parameters") -> ToolSpec:
    """A vendor's function declaration: its name, description and the JSON schema it
    keeps under ``schema_key`` (each dialect names that field its own way)."""
    return ToolSpec(
        string(item.get("name"), f"{where}.name"),
        opt_string(item.get("description"), f"{where}.description"),
        schema(item.get(schema_key), f"{where}.{schema_key}"),
    )


def tool_name(calls: Mapping[str, str], call_id: str) -> str:
    """The tool a result answers: results name only the call, the model wants the tool."""
    return calls.get(call_id, "")
