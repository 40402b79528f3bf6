"""Agent options from the edge: ``--option KEY=VALUE``, typed against what the agent
declares.

An agent declares its options by its constructor: every keyword parameter of a plain
type (``int``, ``float``, ``bool``, ``str``, a ``Literal``, or one of those ``| None``)
that the runtime does not set itself. So ``OrchestratorAgent(mode=...)`` and
``RLMAgent(sub_model=..., max_depth=...)`` are options with no list to keep in step.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .._errors import UsageError

__all__ = ["Option", "check_options", "declared_options", "parse_option_flags"]

#: Set by the runtime from flags, the config and the run: never an ``--option``.
RESERVED = frozenset({
    "engine", "model", "tools", "bus", "executor", "allow_network", "temperature",
    "max_tokens", "system_prompt", "max_turns", "spec", "config", "sandboxed",
})  # fmt: skip
#: Options a user may try that flags decide: the flag to use instead (a silent
#: overwrite would leave the user believing the option held).
FLAG_CHOSEN = {"sandboxed": "--sandbox / --no-sandbox"}
_PLAIN = {"int": int, "float": float, "bool": bool, "str": str}
_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


@dataclass(frozen=True, slots=True)
class Option:
    name: str
    kind: type | None  # None: one of ``choices``
    choices: tuple[str, ...] = ()
    optional: bool = False
    default: object = None

    def describe(self) -> str:
        kind = "|".join(self.choices) if self.kind is None else self.kind.__name__
        return f"{self.name} ({kind})"

    def coerce(self, value: object, agent: str) -> object:
        """``value`` (text from a flag, or JSON from a spec) as this option's type."""
        if value is None or (
            self.optional and isinstance(value, str) and value.lower() in ("none", "null")
        ):
            if self.optional:
                return None
            raise UsageError(f"option {self.name} of agent {agent!r} needs a value")
        if self.kind is None:
            if value not in self.choices:
                raise UsageError(
                    f"option {self.name} of agent {agent!r} must be one of "
                    f"{', '.join(self.choices)}, not {value!r}"
                )
            return value
        try:
            return _convert(self.kind, value)
        except (TypeError, ValueError):
            raise UsageError(
                f"option {self.name} of agent {agent!r} must be {_article(self.kind)}, "
                f"not {value!r}"
            ) from None


def _article(kind: type) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[kind]


def _convert(kind: type, value: object) -> object:
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise ValueError(value)
    if isinstance(value, bool):
        raise ValueError(value)  # True is no count
    if kind is int:
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            return int(value.strip())
        raise ValueError(value)
    if kind is float:
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):
            return float(value.strip())
        raise ValueError(value)
    if not isinstance(value, str):
        raise ValueError(value)
    return value


def _parse_annotation(text: str) -> tuple[type | None, tuple[str, ...], bool] | None:
    parts = [p.strip() for p in text.split("|")]
    optional = "None" in parts
    parts = [p for p in parts if p != "None"]
    if len(parts) != 1:
        return None
    part = parts[0]
    if part in _PLAIN:
        return _PLAIN[part], (), optional
    if part.startswith("Literal[") and part.endswith("]"):
        try:
            values = ast.literal_eval("(" + part[len("Literal[") : -1] + ",)")
        except (ValueError, SyntaxError):
            return None
        if all(isinstance(v, str) for v in values):
            return None, tuple(values), optional
    return None


@functools.cache
def declared_options(agent_cls: type) -> dict[str, Option]:
    """The options ``agent_cls`` declares (its constructors' plain keyword parameters).
    The result is shared: do not change it."""
    options: dict[str, Option] = {}
    for cls in agent_cls.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        for param in inspect.signature(init).parameters.values():
            if param.kind is not inspect.Parameter.KEYWORD_ONLY or param.name in RESERVED:
                continue
            if param.name in options or not isinstance(param.annotation, str):
                continue
            parsed = _parse_annotation(param.annotation)
            if parsed is not None:
                kind, choices, optional = parsed
                default = None if param.default is inspect.Parameter.empty else param.default
                options[param.name] = Option(param.name, kind, choices, optional, default)
    return options


def check_options(agent: str, agent_cls: type, values: Mapping[str, object]) -> dict[str, object]:
    """``values`` checked and typed against what the agent declares; an unknown key is
    refused with the list of known ones."""
    declared = declared_options(agent_cls)
    checked: dict[str, object] = {}
    for name, value in values.items():
        option = declared.get(name)
        if name in FLAG_CHOSEN:
            raise UsageError(
                f"option {name!r} of agent {agent!r} is chosen by {FLAG_CHOSEN[name]}, not --option"
            )
        if option is None:
            known = ", ".join(o.describe() for o in declared.values()) or "none"
            raise UsageError(f"agent {agent!r} has no option {name!r} (its options: {known})")
        checked[name] = option.coerce(value, agent)
    return checked


def parse_option_flags(flags: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` flags as a mapping (typed later, against the agent)."""
    values: dict[str, str] = {}
    for flag in flags:
        key, sep, value = flag.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--option takes KEY=VALUE, not {flag!r}")
        values[key] = value
    return values
