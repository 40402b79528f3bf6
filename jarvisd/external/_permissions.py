"""How an agent's ``session/request_permission`` is answered: a policy per tool kind.

Config ``[agents.permissions]`` maps ACP tool kinds (read, edit, delete, move, search,
execute, think, fetch, switch_mode, other) to ``allow``, ``deny`` or ``ask``, with
``default`` for the kinds it does not name. ``ask`` goes to whoever can answer for the
run (a daemon task waits for `jarvis task approve|deny`); with nobody to ask, the
request is denied.

The kind is the agent's own word for its call, so it is not taken alone
(:func:`judged_kinds`): what the call's input shows counts too. A call that carries a
command is judged as ``execute`` whatever kind it declares, one that carries a URL as
``fetch``, and the strictest decision of all these kinds applies. A call naming a path
that configures tools on the host (``.git/...``, ``.envrc``: :mod:`._protected`) is
denied unless it declares only reading.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "DEFAULT_PERMISSIONS",
    "INPUT_KINDS",
    "TOOL_KINDS",
    "Approver",
    "Decision",
    "PermissionPolicy",
    "PermissionRequest",
    "input_facts",
    "pick_option",
]

Decision = Literal["allow", "deny", "ask"]
DECISIONS: tuple[Decision, ...] = ("allow", "deny", "ask")
TOOL_KINDS = (
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other",
)  # fmt: skip
#: Looking and editing inside the workspace is allowed; the rest is asked.
DEFAULT_PERMISSIONS: Mapping[str, Decision] = {
    "default": "ask",
    "read": "allow",
    "search": "allow",
    "think": "allow",
    "edit": "allow",
    "switch_mode": "allow",
}


#: Keys of a tool call's input that show what the call does, whatever kind it declares.
INPUT_KINDS: Mapping[str, str] = {
    "command": "execute", "cmd": "execute", "commands": "execute", "script": "execute",
    "shell": "execute", "bash": "execute", "argv": "execute",
    "url": "fetch", "urls": "fetch", "uri": "fetch",
}  # fmt: skip
#: Keys of a tool call's input that name a file.
PATH_KEYS = frozenset(
    {"path", "paths", "file", "file_path", "filepath", "filename", "target", "destination",
     "new_path", "old_path", "abs_path", "notebook_path"}
)  # fmt: skip
#: Most input values looked at (an input is the agent's and may be huge or deep).
_MAX_VALUES = 500
_MAX_DEPTH = 6
_STRICTNESS: Mapping[str, int] = {"allow": 0, "ask": 1, "deny": 2}


def input_facts(raw_input: Any, locations: Sequence[Any] = ()) -> tuple[set[str], list[str]]:
    """The kinds a tool call's input shows (``execute`` for a command...) and the
    paths it names (its ``locations`` included), from a bounded walk."""
    kinds: set[str] = set()
    paths: list[str] = [str(p) for loc in locations if (p := getattr(loc, "path", None))]
    budget = [_MAX_VALUES]

    def walk(value: Any, key: str | None, depth: int) -> None:
        if budget[0] <= 0 or depth > _MAX_DEPTH:
            return
        budget[0] -= 1
        name = key.lower() if key else None
        if name is not None and name in INPUT_KINDS and value not in (None, "", [], {}):
            kinds.add(INPUT_KINDS[name])
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, str(k), depth + 1)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v, key, depth + 1)
        elif isinstance(value, str) and name in PATH_KEYS:
            paths.append(value)

    walk(raw_input, None, 0)
    return kinds, paths


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """What an agent asks to do (its text clipped), for a person to decide."""

    tool: str
    kind: str
    arguments: Any = None


#: Answers "ask": True to allow. None when nobody can answer for this run.
Approver = Callable[[PermissionRequest], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class PermissionPolicy:
    rules: Mapping[str, Decision] = field(default_factory=lambda: dict(DEFAULT_PERMISSIONS))

    @classmethod
    def from_mapping(cls, values: Mapping[str, str]) -> PermissionPolicy:
        """The defaults, overridden by ``values`` (checked: the config loader names
        the key when it is wrong)."""
        rules: dict[str, Decision] = dict(DEFAULT_PERMISSIONS)
        for key, value in values.items():
            if key != "default" and key not in TOOL_KINDS:
                raise ValueError(f"unknown tool kind {key!r} (default, {', '.join(TOOL_KINDS)})")
            if value not in DECISIONS:
                raise ValueError(f"{key} must be allow, deny or ask, not {value!r}")
            rules[key] = value
        return cls(rules)

    def decide(self, kind: str | None) -> Decision:
        kind = kind if kind in TOOL_KINDS else "other"
        return self.rules.get(kind) or self.rules.get("default") or "ask"

    def judge(self, kinds: Sequence[str]) -> tuple[str, Decision]:
        """The strictest decision over ``kinds`` (the declared one first) and the
        kind it comes from."""
        judged = [(kind, self.decide(kind)) for kind in kinds]
        return max(judged, key=lambda pair: _STRICTNESS[pair[1]])


def pick_option(options: Sequence[Any], allow: bool) -> str | None:
    """The id of the option that grants (``allow``) or refuses once, else always;
    None when the agent offered none of that sort, or gave it the id of an option of
    the other sort (the answer would be read the other way)."""
    wanted = ("allow_once", "allow_always") if allow else ("reject_once", "reject_always")
    other = {str(o.option_id) for o in options if getattr(o, "kind", None) not in wanted}
    for kind in wanted:
        for option in options:
            if getattr(option, "kind", None) == kind and str(option.option_id) not in other:
                return str(option.option_id)
    return None
