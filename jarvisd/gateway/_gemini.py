"""Gemini (``POST /v1beta/models/{m}:generateContent`` and
``:streamGenerateContent?alt=sse``; also ``:countTokens`` and ``GET /v1beta/models``).

Request: ``contents`` of ``user``/``model`` turns whose ``parts`` hold ``text``,
``functionCall`` or ``functionResponse`` (thoughts are skipped), ``systemInstruction``,
``tools[].functionDeclarations`` (``parameters`` in Gemini's schema, types in capitals,
or ``parametersJsonSchema``), ``generationConfig`` (``maxOutputTokens``,
``temperature``, ``topP``, ``stopSequences``, ``seed``). The stream is unnamed SSE
events, each a whole ``GenerateContentResponse``. Errors are
``{"error": {"code", "message", "status"}}``. Field names are camelCase, as the REST API
and google-genai send them; the snake_case spelling the API also takes is read too.
"""

from __future__ import annotations

import json
from typing import Any

from .._messages import Generation, Message, Role, ToolCall, ToolSpec
from . import _common as c
from ._common import BadRequest, ChatRequest, Dialect

__all__ = ["DIALECT", "count_tokens", "models_body"]


def _get(data: dict[str, Any], camel: str) -> Any:
    value = data.get(camel)
    if value is None:
        snake = "".join("_" + ch.lower() if ch.isupper() else ch for ch in camel)
        value = data.get(snake)
    return value


def _json_schema(value: Any) -> Any:
    """Gemini's schema (``"type": "OBJECT"``) as JSON schema (``"type": "object"``)."""
    if isinstance(value, dict):
        return {
            k: v.lower() if k == "type" and isinstance(v, str) else _json_schema(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_json_schema(v) for v in value]
    return value


def _result_text(response: object) -> str:
    if isinstance(response, dict) and len(response) == 1:
        (value,) = response.values()
        if isinstance(value, str):
            return value
    return json.dumps(response, ensure_ascii=False)


def _parts(value: object, what: str) -> list[dict[str, Any]]:
    return [c.obj(p, f"{what}[{i}]") for i, p in enumerate(c.opt_array(value, what))]


def _turn(
    role: str,
    parts: list[dict[str, Any]],
    what: str,
    names: dict[str, str],
    pending: dict[str, list[str]],
) -> list[Message]:
    out: list[Message] = []
    texts: list[str] = []
    calls: list[ToolCall] = []
    for i, part in enumerate(parts):
        where = f"{what}[{i}]"
        call = _get(part, "functionCall")
        result = _get(part, "functionResponse")
        if part.get("thought") is True:
            continue
        if "text" in part:
            texts.append(c.string(part["text"], f"{where}.text"))
        elif call is not None and role == "model":
            call = c.obj(call, f"{where}.functionCall")
            name = c.string(call.get("name"), f"{where}.functionCall.name")
            call_id = c.opt_string(call.get("id"), f"{where}.functionCall.id") or None
            tool_call = ToolCall.from_arguments(
                name, c.opt_obj(call.get("args"), f"{where}.functionCall.args"), call_id
            )
            names[tool_call.id] = name
            pending.setdefault(name, []).append(tool_call.id)
            calls.append(tool_call)
        elif result is not None and role in ("user", "function"):
            result = c.obj(result, f"{where}.functionResponse")
            name = c.string(result.get("name"), f"{where}.functionResponse.name")
            call_id = c.opt_string(result.get("id"), f"{where}.functionResponse.id")
            waiting = pending.get(name) or []
            if call_id in waiting:
                waiting.remove(call_id)
            elif waiting:  # no id: the oldest unanswered call of that tool
                call_id = waiting.pop(0)
            text = _result_text(result.get("response"))
            out.append(Message.tool(text, tool_call_id=call_id if call_id else None, name=name))
        elif not any(k in part for k in ("thoughtSignature", "thought_signature")):
            raise BadRequest(f"{where}: this kind of part is not supported here")
    if role == "model":
        out.append(Message.assistant("".join(texts), calls))
    elif texts:
        out.append(Message.user("".join(texts)))
    return out


def parse_contents(system: object, raw: object) -> tuple[Message, ...]:
    messages: list[Message] = []
    if system is not None:
        if isinstance(system, str):
            prompt = system
        else:
            parts = _parts(
                c.obj(system, "systemInstruction").get("parts"), "systemInstruction.parts"
            )
            prompt = "".join(
                c.opt_string(p.get("text"), "systemInstruction.parts[].text") for p in parts
            )
        if prompt:
            messages.append(Message.system(prompt))
    items = c.array(raw, "contents")
    names: dict[str, str] = {}
    pending: dict[str, list[str]] = {}
    for i, item in enumerate(items):
        item = c.obj(item, f"contents[{i}]")
        role = item.get("role", "user")
        if role not in ("user", "model", "function"):
            raise BadRequest(f"contents[{i}].role must be user or model")
        parts = _parts(item.get("parts"), f"contents[{i}].parts")
        messages.extend(_turn(role, parts, f"contents[{i}].parts", names, pending))
    if not any(m.role is not Role.SYSTEM for m in messages):
        raise BadRequest("contents must not be empty")
    return tuple(messages)


def parse_tools(raw: object) -> tuple[ToolSpec, ...]:
    specs = []
    for i, tool in enumerate(c.opt_array(raw, "tools")):
        tool = c.obj(tool, f"tools[{i}]")
        declarations = c.opt_array(
            _get(tool, "functionDeclarations"), f"tools[{i}].functionDeclarations"
        )
        for j, decl in enumerate(declarations):
            where = f"tools[{i}].functionDeclarations[{j}]"
            decl = c.obj(decl, where)
            params = _get(decl, "parametersJsonSchema")
            if params is None:
                params = _json_schema(c.schema(decl.get("parameters"), f"{where}.parameters"))
            specs.append(
                c.tool_spec({**decl, "parametersJsonSchema": params}, where, "parametersJsonSchema")
            )
    return tuple(specs)


def parse(raw: object, default_max_tokens: int) -> ChatRequest:
    body = c.obj(raw, "request body")
    config = c.opt_obj(_get(body, "generationConfig"), "generationConfig")
    tool_config = c.opt_obj(_get(body, "toolConfig"), "toolConfig")
    calling = c.opt_obj(_get(tool_config, "functionCallingConfig"), "functionCallingConfig")
    tools = parse_tools(body.get("tools"))
    return ChatRequest(
        messages=parse_contents(_get(body, "systemInstruction"), body.get("contents")),
        tools=() if calling.get("mode") == "NONE" else tools,
        options=c.options(
            default_max_tokens,
            max_tokens=c.count(_get(config, "maxOutputTokens"), "maxOutputTokens"),
            temperature=c.number(config.get("temperature"), "temperature"),
            top_p=c.number(_get(config, "topP"), "topP"),
            seed=c.seed(config.get("seed"), "seed"),
            stop=c.stops(_get(config, "stopSequences"), "stopSequences"),
        ),
        model="",
    )


def _finish(generation: Generation) -> str:
    return "MAX_TOKENS" if generation.finish_reason.value == "length" else "STOP"


def _usage(generation: Generation) -> dict[str, int]:
    usage = generation.usage
    return {
        "promptTokenCount": usage.prompt_tokens,
        "candidatesTokenCount": usage.completion_tokens,
        "totalTokenCount": usage.total_tokens,
    }


def _call_part(call: ToolCall) -> dict[str, Any]:
    return {"functionCall": {"id": call.id, "name": call.name, "args": call.arguments_dict()}}


def _chunk(
    parts: list[dict[str, Any]], model: str, response_id: str, generation: Generation | None = None
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    body: dict[str, Any] = {
        "candidates": [candidate],
        "modelVersion": model,
        "responseId": response_id,
    }
    if generation is not None:
        candidate["finishReason"] = _finish(generation)
        body["usageMetadata"] = _usage(generation)
    return body


def response(generation: Generation, request: ChatRequest, model: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if generation.content or not generation.tool_calls:
        parts.append({"text": generation.content})
    parts.extend(_call_part(call) for call in generation.tool_calls)
    return _chunk(parts, model, c.new_id(""), generation)


class Stream:
    def __init__(self, request: ChatRequest, model: str) -> None:
        self.model = model
        self.id = c.new_id("")
        self.streamed = False

    def start(self) -> bytes:
        return b""

    def delta(self, text: str) -> bytes:
        if not text:
            return b""
        self.streamed = True
        return c.sse(_chunk([{"text": text}], self.model, self.id))

    def finish(self, generation: Generation) -> bytes:
        parts = [_call_part(call) for call in generation.tool_calls]
        if not self.streamed and generation.content:
            parts.insert(0, {"text": generation.content})
        if not parts:
            parts = [{"text": ""}]
        return c.sse(_chunk(parts, self.model, self.id, generation))

    def fail(self, status: int, message: str) -> bytes:
        return c.sse(error(status, message))


_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    402: "RESOURCE_EXHAUSTED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    408: "DEADLINE_EXCEEDED",
    410: "CANCELLED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
}


def error(status: int, message: str) -> dict[str, Any]:
    code = _STATUS.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    return {"error": {"code": status, "message": message, "status": code}}


def count_tokens(raw: object) -> dict[str, Any]:
    """An estimate (about four characters a token): see ``_anthropic.count_tokens``."""
    body = c.obj(raw, "request body")
    request = _get(body, "generateContentRequest")
    if request is not None:
        body = c.obj(request, "generateContentRequest")
    messages = parse_contents(_get(body, "systemInstruction"), body.get("contents"))
    chars = sum(len(m.content) + sum(len(t.arguments) for t in m.tool_calls) for m in messages)
    return {"totalTokens": max(1, chars // 4)}


def models_body(names: list[str]) -> dict[str, Any]:
    return {
        "models": [
            {
                "name": f"models/{n}",
                "displayName": n,
                "supportedGenerationMethods": ["generateContent", "countTokens"],
            }
            for n in names
        ]
    }


DIALECT = Dialect("gemini", parse, response, Stream, error)
