"""`jarvis models list` says which model the embedded engine uses now, and why."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from jarvisd._paths import paths
from tests.test_catalog import fake_hashes, place

from .test_cli import jarvis


@pytest.fixture(autouse=True)
def present(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two qwen models present and verified (their sidecars vouch for them, so the
    `jarvis` process below hashes nothing); smollm2 not pulled."""
    fake_hashes(monkeypatch)
    place("qwen2.5-coder-0.5b", paths().models)
    place("qwen2.5-coder-1.5b", paths().models)


def listed() -> dict[str, dict[str, Any]]:
    out = jarvis("models", "list", "--json")
    assert out.returncode == 0, out.stderr
    return {m["name"]: m for m in json.loads(out.stdout)}


def test_with_no_model_configured_the_strongest_verified_one_is_marked() -> None:
    models = listed()
    assert [n for n, m in models.items() if m["default"]] == ["qwen2.5-coder-1.5b"]
    assert models["qwen2.5-coder-1.5b"]["default_reason"] == (
        "strongest present and verified model (configured: none)"
    )
    assert models["qwen2.5-coder-0.5b"]["default_reason"] is None
    assert models["qwen2.5-coder-0.5b"]["verified"] and not models["smollm2-135m"]["present"]
    text = jarvis("models", "list").stdout.splitlines()
    assert [line.split()[1] for line in text if line.startswith("*")] == ["qwen2.5-coder-1.5b"]
    assert text[-1] == (
        "(* the embedded engine uses qwen2.5-coder-1.5b: "
        "strongest present and verified model (configured: none))"
    )


@pytest.mark.parametrize("key", ["engine.llamacpp.model", "engine.model"])
def test_a_configured_model_is_marked_with_where_it_was_configured(key: str) -> None:
    table, name = key.rsplit(".", 1)
    config = Path(os.environ["JARVIS_CONFIG_DIR"]) / "config.toml"
    config.write_text(f'[{table}]\n{name} = "qwen2.5-coder-0.5b"\n')
    models = listed()
    assert [n for n, m in models.items() if m["default"]] == ["qwen2.5-coder-0.5b"]
    assert models["qwen2.5-coder-0.5b"]["default_reason"] == f"configured in {key}"
