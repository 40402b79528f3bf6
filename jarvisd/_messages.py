"""Typed messages: the one vocabulary every wire and every agent speaks.

Loose input (dicts from JSON, Ollama's or OpenAI's shapes) is converted here, once,
at the edge; everything inside jarvis passes these dataclasses around.

They are values: built once, never changed (``dataclasses.replace`` makes a changed
copy). The ones the tool loop builds on every turn are not ``frozen``, because a frozen
dataclass costs about a microsecond more per instance on that hot path.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

__all__ = [
    "FinishReason",
    "Generation",
    "Message",
    "Role",
    "SamplingOptions",
    "StreamChunk",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Usage",
]

#: Arbitrary JSON, as ``json.loads`` returns it and ``json.dumps`` takes it: the one alias
#: for a value whose shape jarvis does not know (a tool's schema, an engine's extra
#: fields). Known shapes get a TypedDict or a dataclass instead.
JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
#: A JSON object of unknown shape.
JSONObject: TypeAlias = "dict[str, JSONValue]"
#: An instance without its __init__ (see Usage.__add__).
_new = object.__new__


class Role(enum.StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class FinishReason(enum.StrEnum):
    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CANCELLED = "cancelled"

    @classmethod
    def parse(cls, value: str | None) -> FinishReason:
        if value in ("length", "max_tokens"):
            return cls.LENGTH
        if value in ("tool_calls", "function_call"):
            return cls.TOOL_CALLS
        if value == "cancelled":
            return cls.CANCELLED
        return cls.STOP


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:12]


@dataclass(slots=True)
class ToolCall:
    """A model's request to run a tool. ``arguments`` is the raw JSON text the model
    wrote: parsing (and repairing) it is the ToolDispatcher's job, so nothing is lost."""

    name: str
    arguments: str = "{}"
    id: str = field(default_factory=new_call_id)

    @classmethod
    def from_arguments(
        cls, name: str, arguments: Mapping[str, Any] | str | None, id: str | None = None
    ) -> ToolCall:
        if arguments is None:
            text = "{}"
        elif isinstance(arguments, str):
            text = arguments
        else:
            text = json.dumps(dict(arguments), ensure_ascii=False)
        return cls(name=name, arguments=text, id=id or new_call_id())

    def arguments_dict(self) -> JSONObject:
        """Arguments as an object, best effort (for wires that need an object)."""
        try:
            value = json.loads(self.arguments)
        except (ValueError, TypeError):
            return {}
        return value if isinstance(value, dict) else {}

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(
            name=str(data["name"]),
            arguments=str(data.get("arguments", "{}")),
            id=str(data.get("id") or new_call_id()),
        )


@dataclass(slots=True)
class Message:
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    #: For role=tool: which call this answers, and the tool's name.
    tool_call_id: str | None = None
    name: str | None = None

    @classmethod
    def system(cls, content: str) -> Message:
        return cls(Role.SYSTEM, content)

    @classmethod
    def user(cls, content: str) -> Message:
        return cls(Role.USER, content)

    # assistant() and tool() build the message without the dataclass's Python __init__:
    # the tool loop adds both every turn.
    @classmethod
    def assistant(cls, content: str = "", tool_calls: Sequence[ToolCall] = ()) -> Message:
        message = _new(cls)
        message.role, message.content, message.tool_calls = (
            Role.ASSISTANT,
            content,
            tuple(tool_calls),
        )
        message.tool_call_id = message.name = None
        return message

    @classmethod
    def tool(cls, content: str, *, tool_call_id: str | None, name: str) -> Message:
        message = _new(cls)
        message.role, message.content, message.tool_calls = Role.TOOL, content, ()
        message.tool_call_id, message.name = tool_call_id, name
        return message

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"role": self.role.value, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            data["name"] = self.name
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        return cls(
            role=Role(data["role"]),
            content=str(data.get("content") or ""),
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a model is told about a tool: name, description, JSON-schema parameters."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    def to_openai(self) -> dict[str, object]:
        return {"type": "function", "function": self.to_dict()}

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolSpec:
        """The ``to_dict`` form back; KeyError, TypeError or ValueError when malformed."""
        parameters = data.get("parameters") or {}
        if not isinstance(parameters, Mapping):
            raise TypeError("a tool's parameters must be an object")
        return cls(str(data["name"]), str(data.get("description", "")), dict(parameters))


@dataclass(slots=True)
class ToolResult:
    """The outcome of one tool call, always produced, even for failures."""

    tool_name: str
    content: str
    success: bool = True
    call_id: str | None = None
    latency_s: float = 0.0
    metadata: Mapping[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "tool_name": self.tool_name,
            "content": self.content,
            "success": self.success,
            "call_id": self.call_id,
            "latency_s": self.latency_s,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolResult:
        metadata = data.get("metadata")
        return cls(
            tool_name=str(data["tool_name"]),
            content=str(data["content"]),
            success=bool(data.get("success", True)),
            call_id=None if data.get("call_id") is None else str(data["call_id"]),
            latency_s=float(data.get("latency_s") or 0.0),
            metadata=dict(metadata) if isinstance(metadata, Mapping) else {},
        )


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        # Usage(...) without the dataclass's Python __init__: a run adds up its usage
        # twice a turn (its own and its ledger's).
        usage = _new(Usage)
        usage.prompt_tokens = self.prompt_tokens + other.prompt_tokens
        usage.completion_tokens = self.completion_tokens + other.completion_tokens
        return usage

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        return cls(int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0))


@dataclass(frozen=True, slots=True)
class SamplingOptions:
    temperature: float = 0.7
    max_tokens: int = 1024
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    #: Given the reply so far (native tool calls written into it as JSON objects where
    #: they came), the length to keep once it is complete, else None: engines that
    #: stream stop generating there (see ``engines.Cutoff``). Like ``stop``, but for
    #: ends no fixed string marks, such as a complete tool call. Not sent on any wire.
    stop_when: Callable[[str], int | None] | None = field(default=None, compare=False)
    #: The reply must be one JSON object (Ollama's ``"format": "json"``, OpenAI's
    #: ``response_format``): llama.cpp constrains it with its JSON grammar.
    json_format: bool = False

    def to_openai(self) -> dict[str, object]:
        """The OpenAI chat-completions sampling fields (llama.cpp takes the same)."""
        fields: dict[str, object] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.json_format:
            fields["response_format"] = {"type": "json_object"}
        if self.top_p is not None:
            fields["top_p"] = self.top_p
        if self.seed is not None:
            fields["seed"] = self.seed
        if self.stop:
            fields["stop"] = list(self.stop)
        return fields


@dataclass(slots=True)
class Generation:
    """One reply from an engine."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: FinishReason = FinishReason.STOP
    model: str = ""
    latency_s: float = 0.0

    def to_message(self) -> Message:
        return Message.assistant(self.content, self.tool_calls)

    def to_dict(self) -> dict[str, object]:
        return {
            "content": self.content,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "usage": self.usage.to_dict(),
            "finish_reason": self.finish_reason.value,
            "model": self.model,
            "latency_s": self.latency_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Generation:
        usage = data.get("usage") or {}
        return cls(
            content=str(data.get("content") or ""),
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
            usage=Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))),
            finish_reason=FinishReason.parse(data.get("finish_reason")),
            model=str(data.get("model", "")),
            latency_s=float(data.get("latency_s", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """A piece of a streamed reply. The last chunk carries ``done=True`` and the whole
    ``generation`` so that streaming and non-streaming callers end with the same value."""

    delta: str = ""
    done: bool = False
    generation: Generation | None = None
