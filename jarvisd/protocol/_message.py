"""Typed JSON messages: one base class, one set of field readers.

Every message that crosses a process boundary as a JSON object (the frames of
``_frames``, the daemon socket's requests, replies and their payloads) is a frozen
dataclass deriving from :class:`Message`. Its wire form comes from its field
declarations, once:

* ``body()`` is every field in declaration order (``id`` excepted: envelopes carry it
  in their head), nested messages and ``to_dict`` objects as their dicts, tuples as lists;
* ``from_body(id, data)`` / ``from_dict(data)`` read each field with a *reader* chosen
  from its type (``str``, ``int``, ``float``, ``bool``, ``X | None``, ``tuple[X, ...]``,
  a nested message, ``Mapping``), or the one its :func:`wire` declaration names; a
  ``check`` then validates or bounds the value.

Input is hostile (a frame from a sandbox, a line from any local client): a reader never
trusts a type, never coerces silently unless declared ``loose``, and every refusal is the
family's error class (``FrameError``, ``ProtocolError``) with the field named. Standard
library only: the sandbox runner imports it inside a bare python3 container.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, Protocol, TypeVar, Union, overload

from .._errors import JarvisError

__all__ = [
    "MISSING",
    "Invalid",
    "Message",
    "Reader",
    "boolean",
    "integer",
    "list_of",
    "loose",
    "mapping",
    "nested",
    "number",
    "optional_loose",
    "optional_mapping",
    "optional_number",
    "optional_string",
    "raw",
    "string",
    "wire",
]

M = TypeVar("M", bound="Message")
T = TypeVar("T")


class _FromDict(Protocol):
    """A wire type read from a JSON object (a :class:`Message`, ``AgentSpec``)."""

    def from_dict(self, data: Mapping[str, Any], /) -> object: ...


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: The value a reader gets for an absent key (``null`` is ``None``, a different thing).
MISSING: Final = _Missing()


class Invalid(ValueError):
    """A reader's refusal; :class:`Message` re-raises it as its family's error class."""


#: Reads one field: ``(value or MISSING, label) -> typed value``; raises :class:`Invalid`.
Reader = Callable[[object, str], object]
#: Validates (and may bound) a value after reading; raises :class:`Invalid`.
Check = Callable[[Any], object]


# -- readers --------------------------------------------------------------------------


def string(default: str = "", *, required: bool = False) -> Reader:
    def read(value: object, label: str) -> str:
        if value is MISSING and not required:
            return default
        if not isinstance(value, str):
            raise Invalid(f"{label} must be a string")
        return value

    return read


def optional_string(value: object, label: str) -> str | None:
    if value is MISSING or value is None:
        return None
    if not isinstance(value, str):
        raise Invalid(f"{label} must be a string or null")
    return value


def loose(default: str) -> Reader:
    """Any value as its text (absent or null: ``default``): fields only ever shown."""

    def read(value: object, label: str) -> str:
        return default if value is MISSING or value is None else str(value)

    return read


def optional_loose(value: object, label: str) -> str | None:
    return None if value is MISSING or value is None else str(value)


def integer(default: int = 0) -> Reader:
    def read(value: object, label: str) -> int:
        if value is MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(f"{label} must be an integer")
        return value

    return read


def optional_number(value: object, label: str) -> float | None:
    if value is MISSING or value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise Invalid(f"{label} must be a number or null")
    return float(value)


def number(default: float = 0.0) -> Reader:
    def read(value: object, label: str) -> float:
        found = optional_number(value, label)
        return default if found is None else found

    return read


def boolean(default: bool = False, *, required: bool = False, label: str = "") -> Reader:
    def read(value: object, where: str) -> bool:
        if value is MISSING and not required:
            return default
        if not isinstance(value, bool):
            raise Invalid(f"{label or where} must be true or false")
        return value

    return read


def mapping(*, absent: str = "empty", label: str = "") -> Reader:
    """A JSON object. ``absent`` says what stands for one: ``"empty"`` (absent or null
    is ``{}``), ``"falsy"`` (any falsy value is ``{}``: the frames' older, looser rule,
    kept byte for byte with node_bridge/) or ``"never"`` (the field is required)."""

    def read(value: object, where: str) -> Mapping[str, Any]:
        if absent == "falsy" and not value:
            return {}
        if absent == "empty" and (value is MISSING or value is None):
            return {}
        if not isinstance(value, Mapping):
            raise Invalid(f"{label or where} must be an object")
        return value

    return read


def optional_mapping(*, label: str = "") -> Reader:
    def read(value: object, where: str) -> Mapping[str, Any] | None:
        if value is MISSING or value is None:
            return None
        if not isinstance(value, Mapping):
            raise Invalid(f"{label or where} must be an object")
        return value

    return read


def raw(value: object, label: str) -> object:
    """Any JSON value as it came (absent: None): a payload the reader never acts on."""
    return None if value is MISSING else value


def nested(cls: _FromDict, *, optional: bool = False, invalid: str = "") -> Reader:
    """An object read by ``cls.from_dict``: a :class:`Message` (its errors stand as they
    are) or another wire type such as ``AgentSpec``, whose own errors become
    ``invalid <invalid>: ...``."""

    def read(value: object, label: str) -> object:
        if optional and (value is MISSING or value is None):
            return None
        if not isinstance(value, Mapping):
            raise Invalid(f"{label} must be an object")
        if isinstance(cls, type) and issubclass(cls, Message):
            return cls.from_dict(value)
        try:
            return cls.from_dict(value)
        except (TypeError, ValueError, JarvisError) as exc:
            raise Invalid(f"invalid {invalid or 'value'}: {exc}") from exc

    return read


def list_of(item: Reader, what: str, *, required: bool = False) -> Reader:
    """A JSON array (absent or null: empty unless ``required``), each item read by
    ``item``; an item it refuses is reported as the list's fault."""

    def read(value: object, label: str) -> tuple[object, ...]:
        if not required and (value is MISSING or value is None):
            return ()
        if not isinstance(value, list):
            raise Invalid(f"{label} must be a list of {what}")
        try:
            return tuple(item(v, label) for v in value)
        except Invalid:
            raise Invalid(f"{label} must be a list of {what}") from None

    return read


# -- declarations ---------------------------------------------------------------------


@overload
def wire(
    default: T,
    *,
    read: Reader | None = None,
    required: bool = False,
    check: Callable[[T], T] | None = None,
) -> T: ...
@overload
def wire(
    *,
    factory: Callable[[], T],
    read: Reader | None = None,
    required: bool = False,
    check: Callable[[T], T] | None = None,
) -> T: ...
def wire(
    default: object = dataclasses.MISSING,
    *,
    factory: Callable[[], object] | None = None,
    read: Reader | None = None,
    required: bool = False,
    check: Callable[[Any], object] | None = None,
) -> object:
    """A message field with its wire rules: ``read`` replaces the reader its type
    implies; ``required`` refuses an absent value (the dataclass default then serves
    only code that builds the message); ``check`` validates the value read."""
    meta = {"read": read, "required": required, "check": check}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    name: str
    read: Reader
    check: Check | None


_PLANS: dict[type, tuple[_Plan, ...]] = {}


def _default(f: dataclasses.Field[Any]) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return MISSING


def _reader_for(hint: object, f: dataclasses.Field[Any], required: bool) -> Reader:
    """The reader a field's type implies (``required``: an absent value is refused)."""
    default = _default(f)
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType) and type(None) in args and len(args) == 2:
        inner = next(a for a in args if a is not type(None))
        if required:
            return _reader_for(inner, f, True)
        if inner is str:
            return optional_string
        if inner is float:
            return optional_number
        if typing.get_origin(inner) is Mapping or inner is Mapping:
            return optional_mapping()
        return nested(inner, optional=True, invalid=f.name)
    if hint is str:
        return string(default if isinstance(default, str) else "", required=required)
    if hint is bool:
        return boolean(bool(default), required=required)
    if hint is int:
        return integer(default if isinstance(default, int) and not required else 0)
    if hint is float:
        return number(float(default) if isinstance(default, int | float) else 0.0)
    if hint is Any or hint is object:
        return raw
    if origin is Mapping or hint is Mapping:
        return mapping(absent="never" if required else "empty")
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = args[0]
        if item is str:
            return list_of(string(required=True), "strings", required=required)
        return list_of(nested(item, invalid=f.name), "objects", required=required)
    if hasattr(hint, "from_dict"):
        return nested(hint, invalid=f.name)
    raise TypeError(f"no wire reader for field {f.name!r} of type {hint!r}")


def _plan(cls: type) -> tuple[_Plan, ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        plan = tuple(
            _Plan(
                f.name,
                f.metadata.get("read")
                or _reader_for(hints[f.name], f, bool(f.metadata.get("required"))),
                f.metadata.get("check"),
            )
            for f in dataclasses.fields(cls)
            if f.name not in cls._head  # type: ignore[attr-defined]
        )
        _PLANS[cls] = plan
    return plan


def _dump(value: object) -> object:
    if isinstance(value, Message):
        return value.body()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return [_dump(v) for v in value]
    return value


class Message:
    """Base of every typed JSON message (a frozen dataclass). Subclasses set ``_error``
    (the family's error class) and may override ``_label`` (how errors name a field);
    envelopes list the fields their head carries in ``_head``."""

    __slots__ = ()
    _error: ClassVar[type[Exception]] = ValueError
    _head: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def _label(cls, key: str) -> str:
        return f"field {key!r}"

    def body(self) -> dict[str, Any]:
        """The fields, in declaration order, as JSON values."""
        return {p.name: _dump(getattr(self, p.name)) for p in _plan(type(self))}

    def to_dict(self) -> dict[str, Any]:
        return self.body()

    @classmethod
    def read(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """Every field of ``data`` read and checked; the family's error says what is wrong."""
        values: dict[str, Any] = {}
        try:
            for p in _plan(cls):
                value = p.read(data.get(p.name, MISSING), cls._label(p.name))
                values[p.name] = value if p.check is None else p.check(value)
        except Invalid as exc:
            raise cls._error(str(exc)) from None
        return values

    @classmethod
    def from_dict(cls: type[M], data: Mapping[str, Any]) -> M:
        return cls(**cls.read(data))

    @classmethod
    def from_body(cls: type[M], id: str, data: Mapping[str, Any]) -> M:
        return cls(id=id, **cls.read(data))  # type: ignore[call-arg]
