"""What the built-in agents are given when their sandboxed run has no network (no
egress policy): no tool that needs the web, and codex is told there is no network
rather than its own "Network access is enabled". A run with egress, and one on the
host (``--no-sandbox``), keep everything."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from jarvisd.external._registry import BUILTIN, GatewayAccess, Setup

ACCESS = GatewayAccess("http://127.0.0.1:9", "tok-run", "local")
WEB = {"webfetch", "websearch", "codesearch"}
#: (sandboxed, egress) -> whether the agent is offline
RUNS = {"offline": (True, False), "egress": (True, True), "host": (False, False)}


def _setup(tmp_path: Path, run: str, tools: tuple[str, ...] = ()) -> Setup:
    sandboxed, egress = RUNS[run]
    return Setup(tmp_path, tmp_path / "h", ACCESS, root=True, sandboxed=sandboxed,
                 egress=egress, tools=tools)  # fmt: skip


def _opencode_permission(setup: Setup) -> dict[str, str]:
    prepare = BUILTIN["opencode"].prepare
    assert prepare is not None
    return dict(json.loads(prepare(setup).env["OPENCODE_CONFIG_CONTENT"])["permission"])


def _codex_config(setup: Setup) -> dict[str, Any]:
    prepare = BUILTIN["codex"].prepare
    assert prepare is not None
    return tomllib.loads(prepare(setup).files[".codex/config.toml"])


def test_opencode_offline_is_denied_its_web_tools_only(tmp_path: Path) -> None:
    permission = _opencode_permission(_setup(tmp_path, "offline"))
    assert {t for t, d in permission.items() if d == "deny"} == WEB
    # Its coding tools still ask, so jarvis's policy decides.
    assert permission["edit"] == permission["bash"] == "ask"


@pytest.mark.parametrize("run", ["egress", "host"])
def test_opencode_with_network_keeps_webfetch(tmp_path: Path, run: str) -> None:
    assert _opencode_permission(_setup(tmp_path, run)) == {
        "edit": "ask", "bash": "ask", "webfetch": "ask",
    }  # fmt: skip


def test_opencode_offline_denies_webfetch_even_when_tools_name_it(tmp_path: Path) -> None:
    permission = _opencode_permission(_setup(tmp_path, "offline", ("read", "webfetch")))
    assert permission["*"] == "deny" and permission["read"] == "ask"
    assert permission["webfetch"] == "deny"
    egress = _opencode_permission(_setup(tmp_path, "egress", ("read", "webfetch")))
    assert egress == {"*": "deny", "read": "ask", "webfetch": "ask"}


def test_codex_offline_is_told_there_is_no_network(tmp_path: Path) -> None:
    config = _codex_config(_setup(tmp_path, "offline"))
    assert config["sandbox_mode"] == "danger-full-access"  # not its own bubblewrap
    assert config["include_permissions_instructions"] is False
    assert "no network access" in config["developer_instructions"]
    assert config["web_search"] == "disabled"
    assert config["skills"] == {"bundled": {"enabled": False}}
    # The rest is as with network: the run's model through the gateway.
    provider = config["model_providers"]["jarvis"]
    assert provider["base_url"] == "http://127.0.0.1:9/v1" and config["model"] == "local"
    assert "approval_policy" not in config  # jarvis's policy still answers its requests


@pytest.mark.parametrize("run", ["egress", "host"])
def test_codex_with_network_keeps_its_own_text_and_tools(tmp_path: Path, run: str) -> None:
    config = _codex_config(_setup(tmp_path, run))
    for key in ("include_permissions_instructions", "developer_instructions", "web_search",
                "skills"):  # fmt: skip
        assert key not in config
    assert ("sandbox_mode" in config) is (run == "egress")


def _files(name: str, setup: Setup) -> dict[str, Any]:
    prepare = BUILTIN[name].prepare
    assert prepare is not None
    return {path: json.loads(text) for path, text in prepare(setup).files.items()}


def test_claude_and_gemini_offline_deny_their_web_tools(tmp_path: Path) -> None:
    offline = _setup(tmp_path, "offline")
    claude = _files("claude", offline)[".claude/settings.json"]
    assert claude == {"permissions": {"deny": ["WebFetch", "WebSearch"]}}
    gemini = _files("gemini", offline)[".gemini/settings.json"]
    assert gemini["tools"] == {"exclude": ["web_fetch", "google_web_search"]}
    assert gemini["telemetry"] == {"enabled": False}  # its other settings stay


@pytest.mark.parametrize("run", ["egress", "host"])
def test_claude_and_gemini_with_network_keep_them(tmp_path: Path, run: str) -> None:
    assert ".claude/settings.json" not in _files("claude", _setup(tmp_path, run))
    assert "tools" not in _files("gemini", _setup(tmp_path, run))[".gemini/settings.json"]
