"""The Ollama wire of the model server: request parsing and the reply shapes of
``/api/chat``, ``/api/generate``, ``/api/tags`` and ``/api/show`` (pure functions; the
routes are in ``_ollama``). Request bodies are JSON from outside: ``object`` until checked."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from ..._errors import (
    EngineResponseError,
    EngineUnavailable,
    JarvisError,
    ModelNotFound,
)
from ..._messages import (
    Generation,
    Message,
    Role,
    SamplingOptions,
    StreamChunk,
    ToolCall,
    ToolSpec,
)
from ..._toolcalls import calls_end
from ...engines import Engine, ModelInfo
from ...gateway._common import BadRequest

__all__ = [
    "VERSION",
    "beside_calls",
    "error_status",
    "final_line",
    "gguf_metadata",
    "model_entry",
    "now",
    "parse_messages",
    "parse_options",
    "parse_tools",
    "partial_line",
    "stop_at_calls",
    "tag",
    "untag",
    "wants_json",
]

VERSION = "0.6.3-jarvis"


def now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def tag(name: str) -> str:
    return name if ":" in name else name + ":latest"


def untag(name: str) -> str:
    return name[: -len(":latest")] if name.endswith(":latest") else name


def error_status(exc: BaseException) -> int:
    if isinstance(exc, ModelNotFound):
        return 404
    if isinstance(exc, EngineResponseError) and exc.status and 400 <= exc.status < 600:
        return exc.status
    if isinstance(exc, EngineUnavailable):
        return 503
    return 500


def parse_messages(raw: object) -> list[Message]:
    if not isinstance(raw, list):
        raise BadRequest("messages must be a list")
    messages = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            raise BadRequest("each message needs a role")
        try:
            role = Role(item["role"])
        except ValueError:
            raise BadRequest(f"unknown role {item['role']!r}") from None
        calls = []
        for call in item.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise BadRequest("tool_calls[].function.name is required")
            calls.append(ToolCall.from_arguments(fn["name"], fn.get("arguments") or {}))
        content = item.get("content") or ""
        if not isinstance(content, str):
            raise BadRequest("message content must be a string")
        messages.append(
            Message(
                role=role,
                content=content,
                tool_calls=tuple(calls),
                name=item.get("tool_name") or item.get("name"),
            )
        )
    return messages


def parse_tools(raw: object) -> list[ToolSpec]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadRequest("tools must be a list")
    specs = []
    for tool in raw:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest("tools[].function.name is required")
        specs.append(
            ToolSpec(fn["name"], str(fn.get("description") or ""), fn.get("parameters") or {})
        )
    return specs


def parse_options(raw: object) -> SamplingOptions:
    if raw is None:
        return SamplingOptions()
    if not isinstance(raw, dict):
        raise BadRequest("options must be an object")
    try:
        stop = raw.get("stop") or ()
        # Ollama: num_predict -1 (or absent) means "until done"; bound it anyway.
        num_predict = int(raw.get("num_predict") or -1)
        return SamplingOptions(
            temperature=float(raw.get("temperature", 0.8)),
            max_tokens=num_predict if num_predict > 0 else 4096,
            top_p=None if raw.get("top_p") is None else float(raw["top_p"]),
            seed=None if raw.get("seed") is None else int(raw["seed"]),
            stop=tuple(stop) if isinstance(stop, list) else (str(stop),),
        )
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"invalid options: {exc}") from None


def model_entry(info: ModelInfo) -> dict[str, Any]:
    return {
        "name": tag(info.name),
        "model": tag(info.name),
        "modified_at": now(),
        "size": info.size,
        "digest": "",
        "details": {
            "format": info.family or "gguf",
            "family": info.family or "",
            "families": [info.family] if info.family else None,
            "parameter_size": "",
            "quantization_level": "",
        },
    }


def gguf_metadata(engine: Engine, name: str) -> dict[str, Any]:
    """The GGUF metadata of model ``name`` when ``engine`` runs it from a file ({}
    otherwise: the engine is not llama.cpp, or the file cannot be read)."""
    from ...catalog import resolve_model_path
    from ...catalog._gguf import read_gguf_metadata
    from ...engines._llamacpp import LlamaCppEngine, LlamaCppPool

    inner = engine.engines.get(name) if isinstance(engine, LlamaCppPool) else engine
    if not isinstance(inner, LlamaCppEngine):
        return {}
    try:
        path = resolve_model_path(inner.model or name, inner.models_dir)
    except JarvisError:
        return {}
    return read_gguf_metadata(path)


def beside_calls(generation: Generation) -> Generation:
    """``generation`` without the stray text a small model leaves beside its tool calls
    (a lone "{" of a call it began twice): text with no letter or digit says nothing."""
    text = generation.content
    if generation.tool_calls and text and not any(ch.isalnum() for ch in text):
        return replace(generation, content="")
    return generation


def wants_json(value: object) -> bool:
    """Ollama's ``format``: "json", or a JSON schema (answered as JSON, unchecked)."""
    if value in (None, ""):
        return False
    if value == "json" or isinstance(value, dict):
        return True
    raise BadRequest(f'format must be "json" or a JSON schema, not {str(value)[:40]!r}')


def stop_at_calls(options: SamplingOptions, tools: Sequence[ToolSpec]) -> SamplingOptions:
    """With tools offered, generation stops once the reply holds its complete calls
    (``calls_end``): a model that writes one call a dozen times, or prose after its
    call, is stopped here, where the model runs; a client cannot stop it sooner, as
    text that may be a call is held back until the reply ends."""
    if not tools:
        return options
    names = [t.name for t in tools]
    return replace(options, stop_when=lambda text: calls_end(text, names))


def partial_line(chunk: StreamChunk, model: str, shape: str) -> dict[str, Any]:
    """One NDJSON line of a streamed reply (``shape``: "chat" or "generate")."""
    base: dict[str, Any] = {"model": tag(model), "created_at": now(), "done": False}
    if shape == "chat":
        base["message"] = {"role": "assistant", "content": chunk.delta}
    else:
        base["response"] = chunk.delta
    return base


def final_line(
    chunk: StreamChunk, model: str, shape: str, start_ns: int, streamed: bool = False
) -> dict[str, Any]:
    """The done object: the last line of a stream, or the whole reply."""
    g = chunk.generation
    if g is None:
        raise EngineResponseError("engine ended its stream without a result")
    g = beside_calls(g)
    total = time.perf_counter_ns() - start_ns
    reason = g.finish_reason.value
    body: dict[str, Any] = {
        "model": tag(model),
        "created_at": now(),
        "done": True,
        "done_reason": "stop" if reason == "tool_calls" else reason,
        "total_duration": total,
        "load_duration": 0,
        "prompt_eval_count": g.usage.prompt_tokens,
        "prompt_eval_duration": 0,
        "eval_count": g.usage.completion_tokens,
        "eval_duration": total,
    }
    content = "" if streamed else g.content
    if shape == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if g.tool_calls:
            message["tool_calls"] = [
                {"function": {"name": c.name, "arguments": c.arguments_dict()}}
                for c in g.tool_calls
            ]
        body["message"] = message
    else:
        body["response"] = content
    return body
