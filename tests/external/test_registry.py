"""The built-in external agents: pinned, installable, offline, and never handed the
user's real API keys."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jarvisd._errors import AgentNotInstalled
from jarvisd.external._install import install, installed, missing
from jarvisd.external._registry import BUILTIN, GatewayAccess, Setup
from jarvisd.runs import exit_code, to_wire

ACCESS = GatewayAccess("http://127.0.0.1:9", "tok-run", "local")


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_every_package_is_pinned_exactly(name: str) -> None:
    here = Path(__file__).parents[2] / "jarvisd/external/npm" / name
    declared = json.loads((here / "package.json").read_text())["dependencies"]
    assert declared == dict(BUILTIN[name].packages)
    lock = json.loads((here / "package-lock.json").read_text())
    for package, version in declared.items():
        assert lock["packages"][f"node_modules/{package}"]["version"] == version


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_no_real_api_key_reaches_an_agent(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.setenv(var, "sk-REAL-SECRET")
    agent = BUILTIN[name]
    assert agent.prepare is not None
    launch = agent.prepare(Setup(tmp_path / "install", tmp_path / "home", ACCESS, root=True))
    text = json.dumps([launch.env, launch.files])
    assert "sk-REAL-SECRET" not in text
    assert "tok-run" in text  # the gateway's per-run token is its only key
    assert "127.0.0.1:9" in text
    assert launch.env["HOME"] == str(tmp_path / "home")


def test_each_agent_has_its_offline_switches(tmp_path: Path) -> None:
    def env(name: str) -> dict[str, str]:
        prepare = BUILTIN[name].prepare
        assert prepare is not None
        return dict(prepare(Setup(tmp_path, tmp_path / "h", ACCESS, root=True)).env)

    opencode = env("opencode")
    config = json.loads(opencode["OPENCODE_CONFIG_CONTENT"])
    assert config["model"] == config["small_model"] == "jarvis/local"
    assert config["provider"]["jarvis"]["npm"] == "@ai-sdk/openai-compatible"
    assert config["provider"]["jarvis"]["options"]["baseURL"] == "http://127.0.0.1:9/v1"
    assert opencode["OPENCODE_DISABLE_MODELS_FETCH"] == "1"
    codex = BUILTIN["codex"].prepare(Setup(tmp_path, tmp_path / "h", ACCESS, root=True))  # type: ignore[misc]
    assert 'wire_api = "responses"' in codex.files[".codex/config.toml"]
    assert codex.argv[-2:] == ("-c", "analytics.enabled=false")
    assert codex.argv[0].endswith("codex-acp-linux-x64/bin/codex-acp")  # not the Node wrapper
    claude = env("claude")
    assert claude["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and claude["IS_SANDBOX"] == "1"
    assert claude["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
    gemini = env("gemini")
    assert gemini["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:9"
    assert gemini["GEMINI_CLI_TRUST_WORKSPACE"] == "true"


def test_opencode_is_held_to_the_tools_named_and_shown_no_other(tmp_path: Path) -> None:
    prepare = BUILTIN["opencode"].prepare
    assert prepare is not None

    def permission(*tools: str) -> dict[str, str]:
        env = prepare(Setup(tmp_path, tmp_path / "h", ACCESS, tools=tools, egress=True)).env
        return dict(json.loads(env["OPENCODE_CONFIG_CONTENT"])["permission"])

    # Every tool still asks, so jarvis's policy decides what runs.
    assert permission() == {"edit": "ask", "bash": "ask", "webfetch": "ask"}
    assert permission("read", "grep") == {"*": "deny", "read": "ask", "grep": "ask"}
    assert BUILTIN["opencode"].limits_tools
    assert not any(BUILTIN[n].limits_tools for n in ("codex", "claude", "gemini"))


def test_missing_node_or_package_is_one_line_with_the_fix_and_exit_3(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JARVIS_AGENTS_DIR", str(tmp_path))
    assert not installed(BUILTIN["claude"])
    assert missing(BUILTIN["codex"]) == (
        "agent 'codex' is not installed: run `jarvis agents install codex`"
    )
    monkeypatch.setattr(shutil, "which", lambda name: None)
    why = missing(BUILTIN["claude"])
    assert why is not None and "needs Node.js" in why and "\n" not in why
    with pytest.raises(AgentNotInstalled, match="needs npm") as caught:
        install(BUILTIN["claude"])
    code, _ = to_wire(caught.value)
    assert code == "agent_not_installed" and exit_code(code) == 3


def test_opencode_prompt_by_model_name() -> None:
    """A started opencode (its model named ``SLOT_MODEL``) fits a run only when the
    run's model name gives opencode the same system prompt (``fits_model``)."""
    from jarvisd.external._agentpool import SLOT_MODEL, fits_model
    from jarvisd.external._registry import opencode_prompt

    assert opencode_prompt(SLOT_MODEL) == "default"
    for local in ("qwen2.5-coder:1.5b", "scripted", "local", "smollm2-135m", "llama3.1:8b"):
        assert opencode_prompt(local) == "default", local
        assert fits_model(BUILTIN["opencode"], local)
    for vendor in ("gpt-4o", "gpt-5-codex", "o3-mini", "claude-sonnet-4", "gemini-2.5-pro",
                   "Kimi-K2", "muse-spark"):  # fmt: skip
        assert opencode_prompt(vendor) != "default", vendor
        assert not fits_model(BUILTIN["opencode"], vendor)
    assert fits_model(BUILTIN["codex"], "gpt-4o")  # codex's slot is taken whatever the name


def test_no_started_opencode_in_a_container_too_small_for_it() -> None:
    """opencode is killed at its start under 512 MiB: jarvisd keeps none (its keeper
    would start one every few seconds), codex still."""
    from jarvisd._config import parse_config
    from jarvisd.external._agentpool import fits_memory

    small = parse_config({"sandbox": {"memory": "256m"}})
    assert not fits_memory(small, BUILTIN["opencode"])
    assert fits_memory(small, BUILTIN["codex"])
    assert fits_memory(parse_config({}), BUILTIN["opencode"])  # the default, 512m
