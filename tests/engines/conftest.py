"""Tests here reach loopback servers only (jarvisd.testing.refuse_network)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jarvisd.testing import refuse_network


@pytest.fixture(autouse=True)
def no_network() -> Iterator[None]:
    with refuse_network():
        yield
