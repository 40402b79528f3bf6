"""RunOutcome: how one run ended, the one result shape on every wire.

The daemon's ``ask`` reply, a task's stored result, the worker's and the sandbox
runner's result frames and ``jarvis ask --json`` all carry ``RunOutcome.to_dict()``.
A run that did not produce an answer has a :class:`Failure` (a code from
``jarvisd.runs._failures`` and a message) and an empty answer, so a script can always
tell an answer from an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import ProtocolError
from .._messages import ToolResult, Usage
from ._failures import exit_code, from_wire, to_wire

__all__ = ["Failure", "RunOutcome"]


@dataclass(frozen=True, slots=True)
class Failure:
    code: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        return cls(*to_wire(exc))

    @property
    def exit_code(self) -> int:
        return exit_code(self.code)

    def error(self) -> BaseException:
        """The exception this failure stands for (to raise it on this side)."""
        return from_wire(self.code, self.message)

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class RunOutcome:
    answer: str = ""
    agent: str = ""
    engine: str = ""
    model: str = ""
    turns: int = 0
    usage: Usage = field(default_factory=Usage)
    tool_results: tuple[ToolResult, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    failure: Failure | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def exit_code(self) -> int:
        return 0 if self.failure is None else self.failure.exit_code

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "agent": self.agent,
            "engine": self.engine,
            "model": self.model,
            "turns": self.turns,
            "usage": self.usage.to_dict(),
            "tool_results": [r.to_dict() for r in self.tool_results],
            "metadata": dict(self.metadata),
            "duration_s": self.duration_s,
            "failure": None if self.failure is None else self.failure.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> RunOutcome:
        """Parse an outcome from a wire; raises ProtocolError when it is malformed."""
        raw: Mapping[str, Any] = data  # loose JSON: every field is checked below
        try:
            failure = raw.get("failure")
            usage = _or(raw.get("usage"), {})
            metadata = _or(raw.get("metadata"), {})
            results = _or(raw.get("tool_results"), ())
            if not isinstance(usage, Mapping) or not isinstance(metadata, Mapping):
                raise TypeError("usage and metadata must be objects")
            if not isinstance(results, list | tuple):
                raise TypeError("tool_results must be a list")
            if failure is not None and not isinstance(failure, Mapping):
                raise TypeError("failure must be an object")
            return cls(
                answer=str(raw.get("answer") or ""),
                agent=str(raw.get("agent") or ""),
                engine=str(raw.get("engine") or ""),
                model=str(raw.get("model") or ""),
                turns=int(raw.get("turns") or 0),
                usage=Usage.from_dict(usage),
                tool_results=tuple(ToolResult.from_dict(r) for r in results),
                metadata=dict(metadata),
                duration_s=float(raw.get("duration_s") or 0.0),
                failure=None
                if failure is None
                else Failure(
                    str(failure.get("code") or "internal"), str(failure.get("message") or "")
                ),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"malformed run outcome: {exc}") from exc


def _or(value: object, default: object) -> Any:
    """``value``, or ``default`` when it is missing (None); an empty list is a list."""
    return default if value is None else value
