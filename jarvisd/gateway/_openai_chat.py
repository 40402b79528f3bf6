"""OpenAI chat completions (``POST /v1/chat/completions``, ``GET /v1/models``).

Request: ``messages`` (system/developer/user/assistant with ``tool_calls``/tool with
``tool_call_id``; content a string or text parts), ``tools`` of type function,
``max_tokens`` or ``max_completion_tokens``, ``stream`` and
``stream_options.include_usage``. Streamed replies are ``chat.completion.chunk`` events
ending with ``data: [DONE]``; tool calls arrive whole in one delta. Errors are
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import time
from typing import Any

from .._messages import Generation, Message, Role, ToolCall, ToolSpec
from . import _common as c
from ._common import BadRequest, ChatRequest, Dialect

__all__ = ["DIALECT", "models_body"]

_ROLES = {
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
    "tool": Role.TOOL,
    "function": Role.TOOL,
}


def _text(content: object, what: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for i, part in enumerate(c.array(content, what)):
        part = c.obj(part, f"{what}[{i}]")
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text"):
            parts.append(c.string(part.get("text"), f"{what}[{i}].text"))
        elif kind == "refusal":
            parts.append(c.opt_string(part.get("refusal"), f"{what}[{i}].refusal"))
        else:
            raise BadRequest(f"{what}[{i}]: content of type {kind!r} is not supported")
    return "".join(parts)


def _calls(raw: object, what: str) -> tuple[ToolCall, ...]:
    calls = []
    for i, item in enumerate(c.opt_array(raw, what)):
        item = c.obj(item, f"{what}[{i}]")
        fn = c.obj(item.get("function"), f"{what}[{i}].function")
        name = c.string(fn.get("name"), f"{what}[{i}].function.name")
        arguments = fn.get("arguments")
        if not isinstance(arguments, str | dict | type(None)):
            raise BadRequest(f"{what}[{i}].function.arguments must be a string")
        call_id = c.opt_string(item.get("id"), f"{what}[{i}].id") or None
        calls.append(ToolCall.from_arguments(name, arguments, call_id))
    return tuple(calls)


def parse_messages(raw: object) -> tuple[Message, ...]:
    items = c.array(raw, "messages")
    if not items:
        raise BadRequest("messages must not be empty")
    names: dict[str, str] = {}
    messages = []
    for i, item in enumerate(items):
        item = c.obj(item, f"messages[{i}]")
        role = _ROLES.get(role_name) if isinstance(role_name := item.get("role"), str) else None
        if role is None:
            raise BadRequest(f"messages[{i}].role must be one of {', '.join(_ROLES)}")
        content = _text(item.get("content"), f"messages[{i}].content")
        calls = _calls(item.get("tool_calls"), f"messages[{i}].tool_calls")
        names.update((call.id, call.name) for call in calls)
        call_id = c.opt_string(item.get("tool_call_id"), f"messages[{i}].tool_call_id") or None
        name = c.opt_string(item.get("name"), f"messages[{i}].name") or None
        if role is Role.TOOL and name is None and call_id is not None:
            name = c.tool_name(names, call_id) or None
        messages.append(Message(role, content, calls, call_id, name))
    return tuple(messages)


def parse_tools(raw: object) -> tuple[ToolSpec, ...]:
    specs = []
    for i, item in enumerate(c.opt_array(raw, "tools")):
        item = c.obj(item, f"tools[{i}]")
        if item.get("type", "function") != "function":
            continue  # hosted tools (web search, ...) are the vendor's, not the model's
        fn = c.obj(item.get("function"), f"tools[{i}].function")
        specs.append(c.tool_spec(fn, f"tools[{i}].function"))
    return tuple(specs)


def parse(raw: object, default_max_tokens: int) -> ChatRequest:
    body = c.obj(raw, "request body")
    stream_options = c.opt_obj(body.get("stream_options"), "stream_options")
    max_tokens = c.count(body.get("max_completion_tokens"), "max_completion_tokens")
    tools = parse_tools(body.get("tools"))
    return ChatRequest(
        messages=parse_messages(body.get("messages")),
        tools=() if body.get("tool_choice") == "none" else tools,
        options=c.options(
            default_max_tokens,
            max_tokens=max_tokens or c.count(body.get("max_tokens"), "max_tokens"),
            temperature=c.number(body.get("temperature"), "temperature"),
            top_p=c.number(body.get("top_p"), "top_p"),
            seed=c.seed(body.get("seed"), "seed"),
            stop=c.stops(body.get("stop"), "stop"),
        ),
        stream=c.flag(body.get("stream"), "stream"),
        model=c.opt_string(body.get("model"), "model"),
        include_usage=c.flag(stream_options.get("include_usage"), "include_usage"),
    )


def _tool_calls(calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
    return [
        {
            "index": i,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for i, call in enumerate(calls)
    ]


def _finish(generation: Generation) -> str:
    reason = generation.finish_reason.value
    return "stop" if reason == "cancelled" else reason


def response(generation: Generation, request: ChatRequest, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": generation.content}
    if generation.tool_calls:
        message["tool_calls"] = _tool_calls(generation.tool_calls)
    return {
        "id": c.new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": _finish(generation)}
        ],
        "usage": generation.usage.to_dict(),
    }


class Stream:
    def __init__(self, request: ChatRequest, model: str) -> None:
        self.include_usage = request.include_usage
        self.base = {
            "id": c.new_id("chatcmpl-"),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return c.sse({**self.base, "choices": [choice]})

    def start(self) -> bytes:
        return self._chunk({"role": "assistant", "content": ""})

    def delta(self, text: str) -> bytes:
        return self._chunk({"content": text}) if text else b""

    def finish(self, generation: Generation) -> bytes:
        out = b""
        if generation.tool_calls:
            out += self._chunk({"tool_calls": _tool_calls(generation.tool_calls)})
        out += self._chunk({}, _finish(generation))
        if self.include_usage:
            out += c.sse({**self.base, "choices": [], "usage": generation.usage.to_dict()})
        return out + b"data: [DONE]\n\n"

    def fail(self, status: int, message: str) -> bytes:
        # The openai client raises APIError for a data line with an "error" key.
        return c.sse(error(status, message))


_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "insufficient_quota",
    404: "not_found_error",
    410: "cancelled",
    413: "invalid_request_error",
}


def error(status: int, message: str) -> dict[str, Any]:
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def models_body(names: list[str]) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"id": n, "object": "model", "created": 0, "owned_by": "jarvis"} for n in names],
    }


DIALECT = Dialect("openai", parse, response, Stream, error)
