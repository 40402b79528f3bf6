"""OpenAI Responses (``POST /v1/responses``), as codex sends it.

Request: ``instructions``, ``input`` (a string, or items: messages with text parts,
``function_call`` and ``function_call_output``; reasoning and other items are skipped),
``tools`` of type function (flat: ``name``, ``description``, ``parameters``),
``max_output_tokens``, ``stream``. Nothing is stored (``store`` is accepted and ignored:
each request carries its whole history). Streamed replies are named events:
``response.created``, ``response.output_item.added``, ``response.output_text.delta``,
``response.function_call_arguments.delta``/``done``, ``response.output_item.done``,
``response.completed``; a failure mid-stream is ``response.failed``.
"""

from __future__ import annotations

import time
from typing import Any

from .._messages import Generation, Message, Role, ToolCall, ToolSpec
from . import _common as c
from ._common import BadRequest, ChatRequest, Dialect
from ._openai_chat import error

__all__ = ["DIALECT"]

_ROLES = {
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
}
_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text")


def _text(content: object, what: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for i, part in enumerate(c.array(content, what)):
        part = c.obj(part, f"{what}[{i}]")
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            parts.append(c.string(part.get("text"), f"{what}[{i}].text"))
        elif kind == "refusal":
            parts.append(c.opt_string(part.get("refusal"), f"{what}[{i}].refusal"))
        else:
            raise BadRequest(f"{what}[{i}]: content of type {kind!r} is not supported")
    return "".join(parts)


def parse_input(raw: object, instructions: str) -> tuple[Message, ...]:
    messages: list[Message] = [Message.system(instructions)] if instructions else []
    if isinstance(raw, str):
        messages.append(Message.user(raw))
        return tuple(messages)
    names: dict[str, str] = {}
    for i, item in enumerate(c.array(raw, "input")):
        item = c.obj(item, f"input[{i}]")
        kind = item.get("type", "message")
        what = f"input[{i}]"
        if kind == "message":
            role = _ROLES.get(role_name) if isinstance(role_name := item.get("role"), str) else None
            if role is None:
                raise BadRequest(f"{what}.role must be one of {', '.join(_ROLES)}")
            messages.append(Message(role, _text(item.get("content"), f"{what}.content")))
        elif kind == "function_call":
            call = ToolCall(
                c.string(item.get("name"), f"{what}.name"),
                c.opt_string(item.get("arguments"), f"{what}.arguments", "{}"),
                c.string(item.get("call_id"), f"{what}.call_id"),
            )
            names[call.id] = call.name
            last = messages[-1] if messages else None
            # Items of one turn come one by one: the text and every call it made are
            # one assistant message to the model.
            if last is not None and last.role is Role.ASSISTANT:
                messages[-1] = Message.assistant(last.content, (*last.tool_calls, call))
            else:
                messages.append(Message.assistant("", (call,)))
        elif kind == "function_call_output":
            call_id = c.string(item.get("call_id"), f"{what}.call_id")
            output = _text(item.get("output"), f"{what}.output")
            messages.append(
                Message.tool(output, tool_call_id=call_id, name=c.tool_name(names, call_id))
            )
        # Reasoning, hosted-tool calls and references carry nothing the model can use.
    if not any(m.role is not Role.SYSTEM for m in messages):
        raise BadRequest("input must not be empty")
    return tuple(messages)


def parse_tools(raw: object) -> tuple[ToolSpec, ...]:
    specs = []
    for i, item in enumerate(c.opt_array(raw, "tools")):
        item = c.obj(item, f"tools[{i}]")
        if item.get("type") != "function":
            continue  # hosted and custom tools are the vendor's, not the model's
        specs.append(c.tool_spec(item, f"tools[{i}]"))
    return tuple(specs)


def parse(raw: object, default_max_tokens: int) -> ChatRequest:
    body = c.obj(raw, "request body")
    instructions = c.opt_string(body.get("instructions"), "instructions")
    tools = parse_tools(body.get("tools"))
    return ChatRequest(
        messages=parse_input(body.get("input"), instructions),
        tools=() if body.get("tool_choice") == "none" else tools,
        options=c.options(
            default_max_tokens,
            max_tokens=c.count(body.get("max_output_tokens"), "max_output_tokens"),
            temperature=c.number(body.get("temperature"), "temperature"),
            top_p=c.number(body.get("top_p"), "top_p"),
            seed=None,
            stop=(),
        ),
        stream=c.flag(body.get("stream"), "stream"),
        model=c.opt_string(body.get("model"), "model"),
    )


def _usage(generation: Generation) -> dict[str, Any]:
    usage = generation.usage
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def _message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [] if status != "completed" else [_text_part(text)]
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _call_item(call: ToolCall, item_id: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments,
        "status": status,
    }


def _envelope(
    response_id: str,
    created: int,
    model: str,
    status: str,
    output: list[dict[str, Any]],
    generation: Generation | None = None,
) -> dict[str, Any]:
    incomplete = None
    if generation is not None and generation.finish_reason.value == "length":
        status, incomplete = "incomplete", {"reason": "max_output_tokens"}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": incomplete,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None if generation is None else _usage(generation),
    }


def _output(generation: Generation) -> list[dict[str, Any]]:
    output = []
    if generation.content:
        output.append(_message_item(c.new_id("msg_"), generation.content))
    for call in generation.tool_calls:
        output.append(_call_item(call, c.new_id("fc_"), call.arguments, "completed"))
    return output


def response(generation: Generation, request: ChatRequest, model: str) -> dict[str, Any]:
    return _envelope(
        c.new_id("resp_"), int(time.time()), model, "completed", _output(generation), generation
    )


class Stream:
    def __init__(self, request: ChatRequest, model: str) -> None:
        self.id = c.new_id("resp_")
        self.created = int(time.time())
        self.model = model
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.message_id = ""  # set once text began
        self.text: list[str] = []

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return c.sse(data, kind)

    def _response(self, status: str, generation: Generation | None = None) -> dict[str, Any]:
        return _envelope(self.id, self.created, self.model, status, self.output, generation)

    def start(self) -> bytes:
        return self._event(
            "response.created", response=self._response("in_progress")
        ) + self._event("response.in_progress", response=self._response("in_progress"))

    def delta(self, text: str) -> bytes:
        if not text:
            return b""
        out = b""
        if not self.message_id:
            self.message_id = c.new_id("msg_")
            item = _message_item(self.message_id, "", "in_progress")
            out += self._event("response.output_item.added", output_index=0, item=item)
            out += self._event(
                "response.content_part.added",
                item_id=self.message_id,
                output_index=0,
                content_index=0,
                part=_text_part(""),
            )
        self.text.append(text)
        return out + self._event(
            "response.output_text.delta",
            item_id=self.message_id,
            output_index=0,
            content_index=0,
            delta=text,
            logprobs=[],
        )

    def _end_text(self, text: str) -> bytes:
        out = self._event(
            "response.output_text.done",
            item_id=self.message_id,
            output_index=0,
            content_index=0,
            text=text,
            logprobs=[],
        )
        out += self._event(
            "response.content_part.done",
            item_id=self.message_id,
            output_index=0,
            content_index=0,
            part=_text_part(text),
        )
        item = _message_item(self.message_id, text)
        self.output.append(item)
        return out + self._event("response.output_item.done", output_index=0, item=item)

    def finish(self, generation: Generation) -> bytes:
        out = b""
        if not self.message_id and generation.content:
            out += self.delta(generation.content)  # an engine that did not stream its text
        if self.message_id:
            out += self._end_text("".join(self.text))
        for call in generation.tool_calls:
            index, item_id = len(self.output), c.new_id("fc_")
            out += self._event(
                "response.output_item.added",
                output_index=index,
                item=_call_item(call, item_id, "", "in_progress"),
            )
            out += self._event(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=index,
                delta=call.arguments,
            )
            out += self._event(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=index,
                name=call.name,
                arguments=call.arguments,
            )
            item = _call_item(call, item_id, call.arguments, "completed")
            self.output.append(item)
            out += self._event("response.output_item.done", output_index=index, item=item)
        done = self._response("completed", generation)
        kind = "response.incomplete" if done["status"] == "incomplete" else "response.completed"
        return out + self._event(kind, response=done)

    def fail(self, status: int, message: str) -> bytes:
        failed = self._response("failed")
        failed["error"] = error(status, message)["error"]
        return self._event("response.failed", response=failed)


DIALECT = Dialect("openai-responses", parse, response, Stream, error)
