"""Which model the embedded engine loads when none is configured (no model needed: the
catalog's files are faked, and so is hashing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jarvisd._config import Config, parse_config
from jarvisd._paths import paths
from jarvisd.engines import build_engine
from tests.test_catalog import fake_hashes, place

ALL = ("smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")


@pytest.fixture
def models(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every catalog model present and verified in this test's data dir."""
    taken = fake_hashes(monkeypatch)
    for name in ALL:
        place(name, paths().models)
    taken.clear()
    return paths().models


def test_with_no_model_configured_the_strongest_verified_one_is_used(models: Path) -> None:
    engine = build_engine("llamacpp", Config())
    assert Config().engine.llamacpp.model == ""  # "no configured model" is representable
    assert engine.default_model() == "qwen2.5-coder-1.5b"


@pytest.mark.parametrize(
    "config",
    [
        {"engine": {"llamacpp": {"model": "smollm2-135m"}}},
        {"engine": {"model": "smollm2-135m"}},
    ],
)
def test_a_configured_model_wins_over_stronger_ones(
    models: Path, config: dict[str, object]
) -> None:
    engine = build_engine("llamacpp", parse_config(config))
    assert engine.default_model() == "smollm2-135m"


def test_a_model_named_by_the_caller_wins(models: Path) -> None:
    engine = build_engine("llamacpp", Config(), model="qwen2.5-coder-0.5b")
    assert engine.default_model() == "qwen2.5-coder-0.5b"
