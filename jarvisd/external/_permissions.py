"""How an agent's ``session/request_permission`` is answered: a policy per tool kind.

Config ``[agents.permissions]`` maps ACP tool kinds (read, edit, delete, move, search,
execute, think, fetch, switch_mode, other) to ``allow``, ``deny`` or ``ask``, with
``default`` for the kinds it does not name. ``ask`` goes to whoever can answer for the
run (a daemon task waits for `jarvis task approve|deny`); with nobody to ask, the
request is denied.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "DEFAULT_PERMISSIONS",
    "TOOL_KINDS",
    "Approver",
    "Decision",
    "PermissionPolicy",
    "PermissionRequest",
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
