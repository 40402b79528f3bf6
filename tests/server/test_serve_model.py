"""The official `ollama` client drives `jarvis serve-model` over real local inference
(tier 2: llama-cpp-python on pinned models, temperature 0, structure not prose)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import ollama
import pytest

from tests.conftest import link_real_models

pytestmark = pytest.mark.model

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression and return the number.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. 2+2"}},
            "required": ["expression"],
        },
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server() -> Iterator[str]:
    link_real_models("smollm2-135m", "qwen2.5-coder-0.5b")
    port = free_port()
    env = dict(os.environ)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jarvisd", "serve-model", "--port", str(port), "-m", "smollm2-135m",
         "-m", "qwen2.5-coder-0.5b", "--n-ctx", "4096"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)
    if proc.stderr:
        proc.stderr.close()


@pytest.fixture
def client(server: str) -> Iterator[ollama.Client]:
    c = ollama.Client(host=server, timeout=120)
    yield c
    c._client.close()


def test_list_show_ps(client: ollama.Client) -> None:
    names = {m.model for m in client.list().models}
    assert names == {"smollm2-135m:latest", "qwen2.5-coder-0.5b:latest"}
    shown = client.show("smollm2-135m")
    assert shown.modelinfo is not None
    assert any(k.endswith(".context_length") and v == 8192 for k, v in shown.modelinfo.items())
    assert client.ps().models == []  # shown, not run
    # From the GGUF file, as Ollama reports it: the architecture, the context the model
    # was trained for (this server's window is num_ctx), the chat template.
    qwen = client.show("qwen2.5-coder-0.5b")
    assert qwen.modelinfo == {"general.architecture": "qwen2", "qwen2.context_length": 32768}
    assert qwen.details is not None and qwen.details.family == "qwen2"
    assert qwen.details.parameter_size == "0.5B"
    assert qwen.template and "<|im_start|>" in qwen.template
    assert qwen.parameters == "num_ctx 4096"


def test_chat_non_streaming_and_streaming(client: ollama.Client) -> None:
    messages = [{"role": "user", "content": "Name three primary colors."}]
    options = {"temperature": 0, "num_predict": 40}
    whole = client.chat(model="smollm2-135m", messages=messages, options=options, stream=False)
    assert whole.message.role == "assistant" and whole.message.content.strip()
    assert whole.done and whole.eval_count and whole.eval_count > 0
    parts = list(client.chat(model="smollm2-135m", messages=messages, options=options, stream=True))
    assert len(parts) > 3 and parts[-1].done
    streamed = "".join(p.message.content for p in parts)
    # Greedy decoding: streaming and not give the same text.
    assert streamed == whole.message.content
    assert "smollm2-135m:latest" in {m.model for m in client.ps().models}


def test_tool_round_trip(client: ollama.Client) -> None:
    options = {"temperature": 0, "num_predict": 128}
    messages: list[dict[str, object]] = [
        {
            "role": "system",
            "content": "You are a helpful assistant. Use the calculator tool for arithmetic.",
        },
        {"role": "user", "content": "What is 1234 * 5678? Use the calculator."},
    ]
    first = client.chat(
        model="qwen2.5-coder-0.5b", messages=messages, tools=[CALCULATOR], options=options
    )
    calls = first.message.tool_calls or []
    assert calls, f"no structured tool call; content was {first.message.content!r}"
    assert calls[0].function.name == "calculator"
    expression = str(calls[0].function.arguments.get("expression", ""))
    assert "1234" in expression and "5678" in expression
    messages.append(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"name": "calculator", "arguments": dict(calls[0].function.arguments)}}
            ],
        }
    )
    messages.append({"role": "tool", "content": "7006652", "tool_name": "calculator"})
    final = client.chat(
        model="qwen2.5-coder-0.5b", messages=messages, tools=[CALCULATOR], options=options
    )
    assert final.done and (final.message.content or final.message.tool_calls)


def test_streamed_tool_call_arrives_as_a_call_not_as_text(client: ollama.Client) -> None:
    messages = [
        {"role": "system", "content": "Use the calculator tool for arithmetic."},
        {"role": "user", "content": "What is 1234 * 5678? Use the calculator."},
    ]
    parts = list(
        client.chat(
            model="qwen2.5-coder-0.5b",
            messages=messages,
            tools=[CALCULATOR],
            options={"temperature": 0, "num_predict": 128},
            stream=True,
        )
    )
    calls = [c for p in parts for c in p.message.tool_calls or ()]
    assert parts[-1].done and [c.function.name for c in calls] == ["calculator"]
    # As from Ollama: the call is not also streamed as content the client would keep.
    streamed = "".join(p.message.content or "" for p in parts)
    assert "calculator" not in streamed and "expression" not in streamed, streamed


def test_unknown_model_is_404(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="llama9", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 404


def test_jarvis_ask_through_ollama_engine_on_served_model(server: str) -> None:
    config_dir = os.environ["JARVIS_CONFIG_DIR"]
    with open(os.path.join(config_dir, "config.toml"), "w") as fh:
        fh.write(
            f'[engine]\ndefault = "ollama"\nmodel = "smollm2-135m"\n[engine.ollama]\nhost = "{server}"\n'
        )
    out = subprocess.run(
        [sys.executable, "-m", "jarvisd", "ask", "--json", "--temperature", "0", "--max-tokens", "30",
         "Name three primary colors."],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (
        data["engine"] == "ollama"
        and data["answer"].strip()
        and data["usage"]["completion_tokens"] > 0
    )
