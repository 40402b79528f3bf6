"""`jarvis models list/pull/show/rm --engine ollama`: an Ollama server's models managed
with the official ``ollama`` client, through the CLI, against a small Ollama-protocol
server that records what it was asked."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from .test_cli import jarvis, use_ollama

MODEL = {"name": "qwen2.5-coder:1.5b", "model": "qwen2.5-coder:1.5b", "size": 986_000_000,
         "digest": "d", "modified_at": "2026-01-01T00:00:00Z",
         "details": {"format": "gguf", "family": "qwen2", "parameter_size": "1.5B",
                     "quantization_level": "Q4_K_M"}}  # fmt: skip


class FakeOllama(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, dict[str, Any]]] = []
    models: dict[str, dict[str, Any]] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self.seen.append((self.command, self.path, body))
        return body

    def do_GET(self) -> None:
        self._body()
        self._reply(200, {"models": list(self.models.values())})

    def do_POST(self) -> None:
        body = self._body()
        name = body.get("model") or body.get("name")
        if self.path == "/api/show":
            if name not in self.models:
                return self._reply(404, {"error": f"model '{name}' not found"})
            return self._reply(200, {
                "modelfile": "", "parameters": "num_ctx 4096", "template": "{{ .Prompt }}",
                "details": self.models[name]["details"],
                "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768},
            })  # fmt: skip
        if self.path == "/api/pull":
            lines = (
                [{"status": "pulling manifest"}]
                + [
                    {"status": "pulling abc", "digest": "abc", "total": 1000, "completed": c}
                    for c in (0, 250, 500, 1000)
                ]
                + [{"status": "success"}]
            )
            data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
            self.models[name] = dict(MODEL, name=name, model=name)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return None
        return self._reply(404, {"error": "no such endpoint"})

    def do_DELETE(self) -> None:
        name = self._body().get("model")
        if self.models.pop(name, None) is None:
            return self._reply(404, {"error": f"model '{name}' not found"})
        return self._reply(200, {})


@pytest.fixture
def ollama_server() -> Iterator[type[FakeOllama]]:
    FakeOllama.seen, FakeOllama.models = [], {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOllama)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    use_ollama(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield FakeOllama
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_pull_list_show_and_rm_manage_ollamas_models(ollama_server: type[FakeOllama]) -> None:
    pulled = jarvis("models", "pull", "qwen2.5-coder:1.5b", "--engine", "ollama")
    assert pulled.returncode == 0, pulled.stderr
    assert pulled.stdout.strip() == "pulled qwen2.5-coder:1.5b"
    progress = pulled.stderr.splitlines()
    assert progress[0] == "pulling manifest"
    assert "pulling abc 50%" in progress and "pulling abc 100%" in progress
    assert progress[-1] == "success"

    listed = jarvis("models", "list", "--engine", "ollama", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [{"name": "qwen2.5-coder:1.5b", "size": 986_000_000,
        "family": "qwen2", "parameter_size": "1.5B", "quantization": "Q4_K_M"}]  # fmt: skip

    shown = jarvis("models", "show", "qwen2.5-coder:1.5b", "--engine", "ollama", "--json")
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert info["model_info"]["qwen2.context_length"] == 32768
    assert info["details"]["family"] == "qwen2" and info["parameters"] == "num_ctx 4096"

    removed = jarvis("models", "rm", "qwen2.5-coder:1.5b", "--engine", "ollama")
    assert removed.returncode == 0 and removed.stdout.strip() == "removed qwen2.5-coder:1.5b"
    assert [(m, p) for m, p, _ in ollama_server.seen] == [
        ("POST", "/api/pull"), ("GET", "/api/tags"), ("POST", "/api/show"),
        ("DELETE", "/api/delete")]  # fmt: skip


def test_a_model_ollama_lacks_is_one_clear_line(ollama_server: type[FakeOllama]) -> None:
    out = jarvis("models", "show", "llama9", "--engine", "ollama")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "has no model 'llama9': run `jarvis models pull llama9 --engine ollama`" in out.stderr


def test_no_ollama_server_is_one_clear_line() -> None:
    use_ollama("http://127.0.0.1:9")
    out = jarvis("models", "list", "--engine", "ollama")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "cannot reach Ollama at http://127.0.0.1:9" in out.stderr
