"""The typed JSON message kit: wire forms come from the field declarations, and
hostile input is refused with the family's error, the field named."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from jarvisd.protocol import Invalid, Message, wire


class Bad(ValueError):
    pass


def _even(value: int) -> int:
    if value % 2:
        raise Invalid("field 'n' must be even")
    return value


@dataclass(frozen=True, slots=True)
class Inner(Message):
    _error: ClassVar[type[Exception]] = Bad
    name: str = wire("", required=True)


@dataclass(frozen=True, slots=True)
class Outer(Message):
    _error: ClassVar[type[Exception]] = Bad
    n: int = wire(0, check=_even)
    ratio: float | None = None
    on: bool = False
    tags: tuple[str, ...] = ()
    inner: Inner | None = None
    items: tuple[Inner, ...] = ()
    data: Mapping[str, Any] = wire(factory=dict)
    note: str | None = None


def test_wire_form_follows_the_declarations_and_round_trips() -> None:
    msg = Outer(2, 0.5, True, ("a",), Inner("x"), (Inner("y"),), {"k": [1]}, None)
    body = msg.to_dict()
    assert list(body) == ["n", "ratio", "on", "tags", "inner", "items", "data", "note"]
    assert body["inner"] == {"name": "x"} and body["tags"] == ["a"]
    assert Outer.from_dict(body) == msg
    assert Outer.from_dict({}) == Outer()  # absent fields take their defaults


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"n": "2"}, "field 'n' must be an integer"),
        ({"n": True}, "field 'n' must be an integer"),
        ({"n": 3}, "field 'n' must be even"),
        ({"ratio": float("nan")}, "field 'ratio' must be a number or null"),
        ({"on": 1}, "field 'on' must be true or false"),
        ({"tags": "a"}, "field 'tags' must be a list of strings"),
        ({"tags": [1]}, "field 'tags' must be a list of strings"),
        ({"inner": {}}, "field 'name' must be a string"),
        ({"inner": []}, "field 'inner' must be an object"),
        ({"items": [1]}, "field 'items' must be a list of objects"),
        ({"data": None}, None),
        ({"data": [1]}, "field 'data' must be an object"),
        ({"note": 5}, "field 'note' must be a string or null"),
    ],
)
def test_hostile_fields_are_refused_with_the_family_error(
    data: dict[str, Any], message: str | None
) -> None:
    if message is None:
        Outer.from_dict(data)
        return
    with pytest.raises(Bad, match=message):
        Outer.from_dict(data)


def test_frames_take_their_fields_by_name_only() -> None:
    """``ErrorFrame(*to_wire(exc))`` once put the code in the frame's id and the message
    in its code, so the host showed an internal error: every frame is keyword-only, and
    such a call fails at once (and in mypy) instead of sending the wrong fields."""
    import inspect

    from jarvisd.protocol import ErrorFrame, _frames

    with pytest.raises(TypeError):
        ErrorFrame("usage", "bad spec")  # type: ignore[misc]
    assert ErrorFrame(code="usage", message="bad spec").body() == {
        "code": "usage",
        "message": "bad spec",
    }
    frames = [
        cls
        for cls in vars(_frames).values()
        if isinstance(cls, type) and issubclass(cls, _frames.Frame)
    ]
    assert len(frames) > 10
    for cls in frames:
        kinds = {p.kind for p in inspect.signature(cls).parameters.values()}
        assert kinds <= {inspect.Parameter.KEYWORD_ONLY}, cls.__name__
