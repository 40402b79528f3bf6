"""What an ``infer`` frame asks for: one generation from the host's engine.

A program across a process boundary (the sandbox runner, an external agent) has no
engine of its own and no network: it sends :class:`InferRequest` as the ``request`` of
an ``infer`` frame, and the host answers with an ``infer_result`` holding a
``Generation.to_dict()``. The wire form::

    {"messages": [Message.to_dict(), ...],          # at least one
     "model": "",                                   # a wish only: the host's choice stands
     "tools": [{"name", "description", "parameters"}, ...],
     "options": {"temperature", "max_tokens", "top_p", "seed", "stop": [...]}}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._messages import Message, SamplingOptions, ToolSpec
from ._frames import FrameError

__all__ = ["InferRequest"]

_DEFAULTS = SamplingOptions()


@dataclass(frozen=True, slots=True)
class InferRequest:
    messages: tuple[Message, ...]
    model: str = ""
    tools: tuple[ToolSpec, ...] = ()
    options: SamplingOptions = _DEFAULTS

    def to_dict(self) -> dict[str, Any]:
        o = self.options
        return {
            "messages": [m.to_dict() for m in self.messages],
            "model": self.model,
            "tools": [t.to_dict() for t in self.tools],
            "options": {
                "temperature": o.temperature,
                "max_tokens": o.max_tokens,
                "top_p": o.top_p,
                "seed": o.seed,
                "stop": list(o.stop),
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InferRequest:
        """Parse the wire form; :class:`FrameError` says what is wrong with it."""
        try:
            messages = tuple(Message.from_dict(m) for m in data.get("messages") or ())
            tools = tuple(ToolSpec.from_dict(t) for t in data.get("tools") or ())
            raw = data.get("options") or {}
            options = SamplingOptions(
                temperature=float(raw.get("temperature", _DEFAULTS.temperature)),
                max_tokens=int(raw.get("max_tokens", _DEFAULTS.max_tokens)),
                top_p=None if raw.get("top_p") is None else float(raw["top_p"]),
                seed=None if raw.get("seed") is None else int(raw["seed"]),
                stop=tuple(str(s) for s in raw.get("stop") or ()),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FrameError(f"malformed infer request: {exc}") from exc
        if not messages:
            raise FrameError("malformed infer request: no messages")
        return cls(messages, str(data.get("model") or ""), tools, options)
