"""Parsing agent- and project-written Python: an unparsable file is None, and a
collection in the middle of a parse does not turn a good file into an error."""

from __future__ import annotations

import ast
import gc
from collections.abc import Iterator

import pytest

from jarvisd._pysource import parse_module

SOURCE = "".join(f"def f_{i}(x):\n    return x + {i}\n\n" for i in range(200))


class _Finalized:
    """Collected only by the cycle collector; its finalizer parses, as Python 3.11's
    traceback formatting does when an asyncio task logs an exception nobody read."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        ast.parse("x = 1")


@pytest.fixture
def collecting_often() -> Iterator[None]:
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.collect()


def test_a_finalizer_that_parses_mid_parse_does_not_fail_the_parse(collecting_often: None) -> None:
    for _ in range(10):
        for _ in range(50):
            _Finalized()
        tree = parse_module(SOURCE)
        assert tree is not None and len(tree.body) == 200
    assert gc.isenabled()


@pytest.mark.parametrize(
    "source", ["def broken(:\n", "x = '\0'", "-" * 100_000 + "1", "(" * 300 + ")" * 300]
)
def test_unparsable_python_is_none(source: str) -> None:
    assert parse_module(source) is None
