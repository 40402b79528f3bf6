"""Anthropic Messages (``POST /v1/messages``, ``?beta=true`` accepted; also
``/v1/messages/count_tokens`` and ``GET /v1/models``).

Request: ``system`` (a string or text blocks), ``messages`` whose content is a string or
blocks (``text``, ``tool_use``, ``tool_result``; thinking blocks are skipped),
``tools`` (``name``, ``description``, ``input_schema``; server tools are skipped),
``max_tokens``, ``stop_sequences``, ``stream``. Streamed replies are the named events
``message_start``, ``content_block_start``/``delta`` (``text_delta``,
``input_json_delta``)/``stop``, ``message_delta``, ``message_stop``; a failure is an
``error`` event. Errors are ``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

from typing import Any

from .._messages import Generation, Message, Role, ToolCall, ToolSpec
from . import _common as c
from ._common import BadRequest, ChatRequest, Dialect

__all__ = ["DIALECT", "count_tokens", "models_body"]

_SKIPPED = ("thinking", "redacted_thinking")


def _text(content: object, what: str) -> str:
    """Text of a string or of text blocks (a system prompt, a tool result)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for i, block in enumerate(c.array(content, what)):
        block = c.obj(block, f"{what}[{i}]")
        kind = block.get("type")
        if kind == "text":
            parts.append(c.string(block.get("text"), f"{what}[{i}].text"))
        elif kind not in _SKIPPED:
            raise BadRequest(f"{what}[{i}]: content of type {kind!r} is not supported")
    return "\n".join(parts)


def _turn(role: str, content: object, what: str, names: dict[str, str]) -> list[Message]:
    """One Anthropic message: tool results first (each a tool message), then the text
    and tool calls as one user or assistant message."""
    if isinstance(content, str):
        return [Message(Role.USER if role == "user" else Role.ASSISTANT, content)]
    out: list[Message] = []
    texts: list[str] = []
    calls: list[ToolCall] = []
    for i, block in enumerate(c.array(content, what)):
        where = f"{what}[{i}]"
        block = c.obj(block, where)
        kind = block.get("type")
        if kind == "text":
            texts.append(c.string(block.get("text"), f"{where}.text"))
        elif kind == "tool_use" and role == "assistant":
            call = ToolCall.from_arguments(
                c.string(block.get("name"), f"{where}.name"),
                c.opt_obj(block.get("input"), f"{where}.input"),
                c.string(block.get("id"), f"{where}.id"),
            )
            names[call.id] = call.name
            calls.append(call)
        elif kind == "tool_result" and role == "user":
            call_id = c.string(block.get("tool_use_id"), f"{where}.tool_use_id")
            result = _text(block.get("content"), f"{where}.content")
            if c.flag(block.get("is_error"), f"{where}.is_error"):
                result = "Error: " + result
            out.append(Message.tool(result, tool_call_id=call_id, name=c.tool_name(names, call_id)))
        elif kind not in _SKIPPED:
            raise BadRequest(f"{where}: a {kind!r} block is not supported in a {role} message")
    text = "".join(texts) if role == "assistant" else "\n".join(texts)
    if role == "assistant":
        out.append(Message.assistant(text, calls))
    elif text:
        out.append(Message.user(text))
    return out


def parse_messages(system: object, raw: object) -> tuple[Message, ...]:
    messages: list[Message] = []
    prompt = _text(system, "system")
    if prompt:
        messages.append(Message.system(prompt))
    items = c.array(raw, "messages")
    if not items:
        raise BadRequest("messages must not be empty")
    names: dict[str, str] = {}
    extra_system: list[str] = []
    for i, item in enumerate(items):
        item = c.obj(item, f"messages[{i}]")
        role = item.get("role")
        if role == "system":
            # Claude Code 0.3 sends its environment notes as a system message among the
            # turns; local chat templates want one system prompt, first: joined there.
            extra_system.append(_text(item.get("content"), f"messages[{i}].content"))
            continue
        if role not in ("user", "assistant"):
            raise BadRequest(f"messages[{i}].role must be user, assistant or system")
        messages.extend(_turn(role, item.get("content"), f"messages[{i}].content", names))
    extra = "\n\n".join(t for t in extra_system if t)
    if extra:
        if prompt:
            messages[0] = Message.system(prompt + "\n\n" + extra)
        else:
            messages.insert(0, Message.system(extra))
    return tuple(messages)


def parse_tools(raw: object) -> tuple[ToolSpec, ...]:
    specs = []
    for i, item in enumerate(c.opt_array(raw, "tools")):
        item = c.obj(item, f"tools[{i}]")
        if item.get("type") not in (None, "custom"):
            continue  # server tools (web search, ...) are Anthropic's, not the model's
        specs.append(c.tool_spec(item, f"tools[{i}]", "input_schema"))
    return tuple(specs)


def parse(raw: object, default_max_tokens: int) -> ChatRequest:
    body = c.obj(raw, "request body")
    tools = parse_tools(body.get("tools"))
    choice = c.opt_obj(body.get("tool_choice"), "tool_choice")
    return ChatRequest(
        messages=parse_messages(body.get("system"), body.get("messages")),
        tools=() if choice.get("type") == "none" else tools,
        options=c.options(
            default_max_tokens,
            max_tokens=c.count(body.get("max_tokens"), "max_tokens"),
            temperature=c.number(body.get("temperature"), "temperature"),
            top_p=c.number(body.get("top_p"), "top_p"),
            seed=None,
            stop=c.stops(body.get("stop_sequences"), "stop_sequences"),
        ),
        stream=c.flag(body.get("stream"), "stream"),
        model=c.opt_string(body.get("model"), "model"),
    )


_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "cancelled": "end_turn",
}


def _stop_reason(generation: Generation) -> str:
    if generation.tool_calls:
        return "tool_use"
    return _STOP[generation.finish_reason.value]


def _tool_use(call: ToolCall, with_input: bool = True) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": call.id,
        "name": call.name,
        "input": call.arguments_dict() if with_input else {},
    }


def _message(model: str, message_id: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
    }


def response(generation: Generation, request: ChatRequest, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if generation.content or not generation.tool_calls:
        content.append({"type": "text", "text": generation.content})
    content.extend(_tool_use(call) for call in generation.tool_calls)
    body = _message(model, c.new_id("msg_"), content)
    body["stop_reason"] = _stop_reason(generation)
    body["usage"] = {
        "input_tokens": generation.usage.prompt_tokens,
        "output_tokens": generation.usage.completion_tokens,
    }
    return body


class Stream:
    def __init__(self, request: ChatRequest, model: str) -> None:
        self.model = model
        self.index = 0
        self.text_open = False

    def start(self) -> bytes:
        message = _message(self.model, c.new_id("msg_"), [])
        message["usage"] = {"input_tokens": 0, "output_tokens": 0}
        return c.sse({"type": "message_start", "message": message}, "message_start")

    def _event(self, kind: str, **fields: Any) -> bytes:
        return c.sse({"type": kind, **fields}, kind)

    def delta(self, text: str) -> bytes:
        if not text:
            return b""
        out = b""
        if not self.text_open:
            self.text_open = True
            out += self._event(
                "content_block_start", index=self.index, content_block={"type": "text", "text": ""}
            )
        delta = {"type": "text_delta", "text": text}
        return out + self._event("content_block_delta", index=self.index, delta=delta)

    def finish(self, generation: Generation) -> bytes:
        out = b""
        if not self.text_open and generation.content:
            out += self.delta(generation.content)  # an engine that did not stream its text
        if self.text_open:
            out += self._event("content_block_stop", index=self.index)
            self.index += 1
        for call in generation.tool_calls:
            out += self._event(
                "content_block_start", index=self.index, content_block=_tool_use(call, False)
            )
            delta = {"type": "input_json_delta", "partial_json": call.arguments}
            out += self._event("content_block_delta", index=self.index, delta=delta)
            out += self._event("content_block_stop", index=self.index)
            self.index += 1
        out += self._event(
            "message_delta",
            delta={"stop_reason": _stop_reason(generation), "stop_sequence": None},
            usage={
                "input_tokens": generation.usage.prompt_tokens,
                "output_tokens": generation.usage.completion_tokens,
            },
        )
        return out + self._event("message_stop")

    def fail(self, status: int, message: str) -> bytes:
        return c.sse(error(status, message), "error")


_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def error(status: int, message: str) -> dict[str, Any]:
    kind = _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def count_tokens(raw: object) -> dict[str, Any]:
    """An estimate (about four characters a token): the run's engine has no tokenizer
    call, and agents use this only to decide when to compact their history."""
    request = parse(raw, 1)
    chars = sum(
        len(m.content) + sum(len(t.arguments) for t in m.tool_calls) for m in request.messages
    )
    return {"input_tokens": max(1, chars // 4)}


def models_body(names: list[str]) -> dict[str, Any]:
    data = [
        {"type": "model", "id": n, "display_name": n, "created_at": "2025-01-01T00:00:00Z"}
        for n in names
    ]
    return {"data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]}


DIALECT = Dialect("anthropic", parse, response, Stream, error)
