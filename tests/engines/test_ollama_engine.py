"""The Ollama engine against the protocol-faithful stand-in (and the official client
against the stand-in, so both sides keep to Ollama's protocol)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import ollama
import pytest

from jarvisd import EngineResponseError, EngineUnavailable, Message, ModelNotFound, ToolSpec
from jarvisd.engines import OllamaEngine, ScriptedEngine, reply
from jarvisd.testing import OllamaStandIn

CALC = ToolSpec(
    "calculator",
    "Evaluate arithmetic.",
    {"type": "object", "properties": {"expression": {"type": "string"}}},
)


def test_generate_stream_tools_and_num_ctx() -> None:
    engine = ScriptedEngine(
        [
            reply("Paris is the capital."),
            reply("", ("calculator", {"expression": "6*7"})),
            reply("one two three"),
        ],
        context_window=12345,
    )

    async def go(url: str) -> None:
        client = OllamaEngine(url, model="scripted", timeout=5)
        g = await client.generate([Message.user("capital of France?")])
        assert g.content == "Paris is the capital." and g.usage.completion_tokens > 0
        g = await client.generate([Message.user("6*7?")], tools=[CALC])
        assert [(c.name, c.arguments_dict()) for c in g.tool_calls] == [
            ("calculator", {"expression": "6*7"})
        ]
        assert g.finish_reason.value == "tool_calls"
        deltas = []
        async for chunk in client.stream([Message.user("count")]):
            deltas.append(chunk.delta)
            if chunk.done:
                assert chunk.generation is not None and chunk.generation.content == "one two three"
        assert "".join(deltas) == "one two three"
        await client.aclose()

    with OllamaStandIn(engine) as standin:
        asyncio.run(go(standin.url))
        chats = [body for method, path, body in standin.requests if path == "/api/chat"]
    # num_ctx comes from the model's real context length (/api/show), not Ollama's default.
    assert all(body["options"]["num_ctx"] == 12345 for body in chats)
    assert chats[1]["tools"][0]["function"]["name"] == "calculator"
    # Tool results go back the way Ollama expects them.
    assert engine.calls[0].messages[0].content == "capital of France?"


def test_num_ctx_is_capped_by_max_context() -> None:
    engine = ScriptedEngine([reply("ok")], context_window=131072)

    async def go(url: str) -> int | None:
        client = OllamaEngine(url, model="scripted", timeout=5, max_context=8192)
        await client.generate([Message.user("hi")])
        length = await client.context_length()
        await client.aclose()
        return length

    with OllamaStandIn(engine) as standin:
        assert asyncio.run(go(standin.url)) == 8192  # what the agents fit history to
        chats = [body for method, path, body in standin.requests if path == "/api/chat"]
    assert chats[0]["options"]["num_ctx"] == 8192


def test_errors_are_translated() -> None:
    engine = ScriptedEngine([EngineResponseError("model exploded", 500)])

    async def go(url: str) -> None:
        client = OllamaEngine(url, model="scripted", timeout=5)
        with pytest.raises(EngineResponseError, match="model exploded"):
            await client.generate([Message.user("x")])
        await client.aclose()
        missing = OllamaEngine(url, model="nope", timeout=5)
        with pytest.raises(ModelNotFound, match="ollama pull nope"):
            await missing.generate([Message.user("x")])
        await missing.aclose()

    with OllamaStandIn(engine) as standin:
        asyncio.run(go(standin.url))


def test_unreachable_is_engine_unavailable() -> None:
    async def go() -> None:
        client = OllamaEngine("http://127.0.0.1:9", model="m", connect_timeout=0.5)
        with pytest.raises(EngineUnavailable, match="cannot reach Ollama"):
            await client.generate([Message.user("x")])
        assert await client.health() is False
        await client.aclose()

    asyncio.run(go())


def test_ollama_host_env_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "10.1.2.3:4567")
    assert OllamaEngine().host == "http://10.1.2.3:4567"
    assert OllamaEngine("http://h:1").host == "http://h:1"


def test_official_client_against_standin_error_bodies() -> None:
    with OllamaStandIn(ScriptedEngine()) as standin:
        client = ollama.Client(host=standin.url, timeout=5)
        with pytest.raises(ollama.ResponseError) as info:
            client.chat(model="missing", messages=[{"role": "user", "content": "x"}])
        assert info.value.status_code == 404
        with pytest.raises(ollama.ResponseError) as info:
            client.chat(model="scripted", messages=[{"role": "wizard", "content": "x"}])
        assert info.value.status_code == 400
        # Script exhausted mid-test: a 500 with a body, not a hang or a dropped socket.
        with pytest.raises(ollama.ResponseError) as info:
            client.chat(model="scripted", messages=[{"role": "user", "content": "x"}], stream=False)
        assert info.value.status_code == 500 and "script exhausted" in info.value.error
        client._client.close()


@pytest.mark.parametrize(
    "host",
    [
        "",
        "example.com",
        "example.com:56789",
        "http://example.com",
        "https://example.com",
        "https://example.com:56789",
        "http://example.com/path/",
        "0.0.0.0",
        "[::1]:1234",
        "http://[0001:002:003:0004::1]:56789/path",
        "10.1.2.3:4567",
    ],
)
def test_hosts_resolve_as_the_official_client_resolves_them(host: str) -> None:
    from ollama._client import _parse_host

    from jarvisd.engines._ollama import base_url

    assert base_url(host) == _parse_host(host or None)


def _raw_server(body: bytes, status: int = 200) -> Any:
    """A one-shot HTTP server that answers every request with ``body``."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(status)
            self.send_header("Content-Type", "application/x-ndjson")
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b'{"message": {"content": "a"}}\n{"error": "GPU fell over"}\n', "GPU fell over"),
        (b'{"message": {"content": "a"}}\n[1, 2]\n', "malformed reply"),
        (b'{"message": {"content": "a"}}\n{not json\n', "malformed reply"),
        (b'{"message": {"content": "a"}}\n', "without done"),
        (b"x" * (5 * 1024 * 1024), "longer than"),
    ],
)
def test_a_bad_stream_is_a_clear_engine_error(body: bytes, match: str) -> None:
    server = _raw_server(body)

    async def go() -> None:
        engine = OllamaEngine(f"http://127.0.0.1:{server.server_address[1]}", model="m")
        engine._num_ctx["m"] = None  # no /api/show on this server
        with pytest.raises(EngineResponseError, match=match):
            async for _ in engine.stream([Message.user("x")]):
                pass
        await engine.aclose()

    try:
        asyncio.run(go())
    finally:
        server.shutdown()
        server.server_close()


def test_in_process_ask_imports_no_ollama_client_or_pydantic(tmp_path: Path) -> None:
    """The ``ollama`` package builds a TLS client and loads pydantic on import: more than
    a one-shot `jarvis ask` costs otherwise. The engine speaks the API itself."""
    code = (
        "import sys\n"
        "from jarvisd.cli import main\n"
        "try:\n"
        "    main(['ask', '--no-stream', 'hi'])\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        "print(','.join(sorted(m for m in ('ollama', 'pydantic') if m in sys.modules)))\n"
    )
    with OllamaStandIn(ScriptedEngine(fallback=reply("Hello."))) as standin:
        (tmp_path / "config.toml").write_text(
            f'[engine]\ndefault = "ollama"\nmodel = "scripted"\n'
            f'[engine.ollama]\nhost = "{standin.url}"\n'
        )
        env = dict(
            os.environ,
            JARVIS_CONFIG_DIR=str(tmp_path),
            JARVIS_DATA_DIR=str(tmp_path / "data"),
            JARVIS_RUNTIME_DIR=str(tmp_path / "run"),
            JARVIS_STATE_DIR=str(tmp_path / "state"),
        )
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["Hello.", ""]
