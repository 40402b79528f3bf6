"""The Ollama-protocol server over a scripted engine (tier 1): what /api/ps reports."""

from __future__ import annotations

import ollama

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
