"""Boundary contracts: what crosses from one member to another is checked against a
declared type. ``returns(member, T)`` asks once more, with the error, when the first
answer does not fit; a second misfit is a failed result, never an unchecked value.

Types are plain Python: ``str``, ``int``, ``float``, ``bool``, ``list[...]``,
``dict[str, ...]`` and dataclasses of these (the standard library only: no schema
package). Models wrap JSON in fences or prose; the first JSON value found is used.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, TypeVar, get_args, get_origin

from .._errors import PatternError
from .._runcontext import RunContext
from ..agents import AgentContext
from ._base import Member, MemberLike, Pattern, Result, as_member

__all__ = ["ContractError", "Returns", "parse_as", "returns"]

T = TypeVar("T")

#: A reply larger than this is not searched for JSON (it is hostile or runaway).
MAX_REPLY_CHARS = 200_000


class ContractError(PatternError):
    """A value does not fit its declared type; the message says where."""


def _json_value(text: str) -> object:
    text = text.strip()
    if len(text) > MAX_REPLY_CHARS:
        raise ContractError(f"reply of {len(text)} characters is too long to check")
    try:
        return json.loads(text)
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for at, char in enumerate(text):
        if char in "{[":
            try:
                return decoder.raw_decode(text, at)[0]
            except ValueError:
                continue
    raise ContractError("no JSON value in the reply")


def parse_as(kind: type[T] | Any, text: str) -> T:
    """``text`` (a model's reply) as a value of ``kind``; :class:`ContractError` names
    the first field that does not fit."""
    if kind is str:
        return typing.cast(T, text.strip())
    return typing.cast(T, convert(kind, _json_value(text), "value"))


def convert(kind: object, value: object, where: str) -> object:
    """``value`` (decoded JSON) checked and converted to ``kind``."""
    if kind is Any or kind is object:
        return value
    origin = get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        for option in get_args(kind):
            try:
                return convert(option, value, where)
            except ContractError:
                continue
        raise ContractError(f"{where}: {value!r} fits none of {kind}")
    if kind is type(None):
        if value is None:
            return None
        raise ContractError(f"{where}: expected null, got {type(value).__name__}")
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        if not isinstance(value, dict):
            raise ContractError(f"{where}: expected an object, got {type(value).__name__}")
        hints = typing.get_type_hints(kind)
        values = {}
        for f in dataclasses.fields(kind):
            if f.name in value:
                values[f.name] = convert(hints[f.name], value[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ContractError(f"{where}: missing field {f.name!r}")
        return kind(**values)
    if origin in (list, tuple) or kind in (list, tuple):
        if not isinstance(value, list):
            raise ContractError(f"{where}: expected a list, got {type(value).__name__}")
        args = get_args(kind)
        item = args[0] if args else Any
        items = [convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin or kind) is tuple else items
    if origin is dict or kind is dict:
        if not isinstance(value, dict):
            raise ContractError(f"{where}: expected an object, got {type(value).__name__}")
        args = get_args(kind)
        item = args[1] if len(args) == 2 else Any
        return {k: convert(item, v, f"{where}.{k}") for k, v in value.items()}
    if kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind in (str, bool):
        if isinstance(value, kind):
            return value
    else:
        raise ContractError(f"{where}: type {kind!r} cannot be checked")
    raise ContractError(f"{where}: expected {kind.__name__}, got {type(value).__name__}")


def describe(kind: object) -> str:
    """How ``kind`` is asked for in a prompt: a JSON shape."""
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        hints = typing.get_type_hints(kind)
        fields = ", ".join(
            f'"{f.name}": {describe(hints[f.name])}' for f in dataclasses.fields(kind)
        )
        return "{" + fields + "}"
    origin = get_origin(kind)
    if origin in (list, tuple):
        args = get_args(kind)
        return f"[{describe(args[0]) if args else 'any'}, ...]"
    return getattr(kind, "__name__", str(kind))


class Returns(Pattern):
    """A member whose answer must parse as ``kind``: the checked value is the result's
    ``output``. One corrective turn (the error and the expected shape) is allowed."""

    kind = "returns"

    def __init__(self, member: MemberLike, output_type: object, *, retries: int = 1) -> None:
        self.member: Member = as_member(member)
        super().__init__(self.member.name)
        self.output_type = output_type
        self.retries = retries

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> Result:
        run = run or RunContext()
        ask = input
        result: Result | None = None
        for attempt in range(self.retries + 1):
            # Not call_member: this wrapper is the member itself, seen from outside.
            result = await self.member.arun(ask, context, run=run)
            if not result.success:
                return result
            try:
                result.output = parse_as(self.output_type, result.content)
            except ContractError as exc:
                result.error = f"answer does not fit {describe(self.output_type)}: {exc}"
                ask = (
                    f"{input}\n\nYour previous answer could not be used ({exc}). Reply with "
                    f"only JSON of this shape: {describe(self.output_type)}"
                )
                result.metadata["contract_attempts"] = attempt + 1
                continue
            result.metadata["contract_attempts"] = attempt + 1
            return result
        assert result is not None  # the loop ran at least once
        return result


def returns(member: MemberLike, output_type: object, *, retries: int = 1) -> Returns:
    """``member`` with a boundary contract: its answer must parse as ``output_type``."""
    return Returns(member, output_type, retries=retries)
