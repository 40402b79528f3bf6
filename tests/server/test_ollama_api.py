"""The Ollama-protocol server over a scripted engine (tier 1): what /api/ps reports."""

from __future__ import annotations

import ollama
import pytest

from jarvisd.engines import ScriptedEngine, reply
from jarvisd.testing import OllamaStandIn


def test_ps_lists_models_that_ran_not_ones_only_shown() -> None:
    with OllamaStandIn(ScriptedEngine([reply("hi")])) as standin:
        client = ollama.Client(host=standin.url, timeout=5)
        assert client.show("scripted").modelinfo == {
            "general.architecture": "scripted",
            "scripted.context_length": 8192,
        }
        assert client.ps().models == []
        client.chat(model="scripted", messages=[{"role": "user", "content": "x"}])
        assert [m.model for m in client.ps().models] == ["scripted:latest"]
        client._client.close()


def test_a_model_named_without_its_tag_is_found_behind_an_ollama_engine() -> None:
    # serve-model in front of Ollama: the engine lists "scripted:latest", and a client
    # asking for "scripted" means that model, as it does with Ollama itself.
    from jarvisd.engines import OllamaEngine
    from jarvisd.http.serve import OllamaServer

    with (
        OllamaStandIn(ScriptedEngine([reply("hi"), reply("hi")])) as upstream,
        OllamaServer(OllamaEngine(upstream.url), port=0) as front,
    ):
        client = ollama.Client(host=front.url, timeout=5)
        for name in ("scripted", "scripted:latest"):
            answer = client.chat(model=name, messages=[{"role": "user", "content": "x"}])
            assert answer.message.content == "hi"
        with pytest.raises(ollama.ResponseError, match="not found"):
            client.chat(model="scripted:7b", messages=[{"role": "user", "content": "x"}])
        client._client.close()
