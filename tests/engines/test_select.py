"""Engine selection: explicit flag, then config, then the first healthy (a reachable
Ollama, else the embedded engine)."""

from __future__ import annotations

import pytest

from jarvisd import EngineUnavailable, UsageError
from jarvisd._config import parse_config
from jarvisd.engines import LlamaCppEngine, OllamaEngine, OpenAIEngine, select_engine
from jarvisd.testing import OllamaStandIn

NOTHING_THERE = "127.0.0.1:9"  # loopback discard port: connection refused at once


def test_explicit_flag_beats_config() -> None:
    config = parse_config({"engine": {"default": "ollama"}})
    assert isinstance(select_engine(config, "openai"), OpenAIEngine)


def test_config_beats_a_reachable_ollama(monkeypatch: pytest.MonkeyPatch) -> None:
    with OllamaStandIn() as standin:
        monkeypatch.setenv("OLLAMA_HOST", standin.url)
        engine = select_engine(parse_config({"engine": {"default": "openai"}}))
    assert isinstance(engine, OpenAIEngine)


def test_auto_takes_the_ollama_that_answers_at_ollama_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with OllamaStandIn() as standin:
        url = standin.url
        monkeypatch.setenv("OLLAMA_HOST", url.removeprefix("http://"))  # often host:port
        engine = select_engine(parse_config({}), model="scripted")
    assert isinstance(engine, OllamaEngine)
    assert engine.host == url and engine.model == "scripted"


def test_auto_config_host_beats_ollama_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", NOTHING_THERE)
    with OllamaStandIn() as standin:
        url = standin.url
        engine = select_engine(parse_config({"engine": {"ollama": {"host": url}}}))
    assert isinstance(engine, OllamaEngine) and engine.host == url


def test_auto_falls_back_to_the_embedded_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", NOTHING_THERE)
    monkeypatch.setattr("jarvisd.engines._llamacpp.llama_cpp_available", lambda: True)
    config = parse_config({"engine": {"llamacpp": {"model": "qwen2.5-coder-0.5b"}}})
    engine = select_engine(config)
    assert isinstance(engine, LlamaCppEngine) and engine.model == "qwen2.5-coder-0.5b"


def test_auto_with_nothing_usable_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", NOTHING_THERE)
    monkeypatch.setattr("jarvisd.engines._llamacpp.llama_cpp_available", lambda: False)
    with pytest.raises(EngineUnavailable, match="make setup") as info:
        select_engine(parse_config({}))
    assert info.value.exit_code == 3


def test_unknown_engine_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown engine 'nonsense'"):
        select_engine(parse_config({}), "nonsense")
