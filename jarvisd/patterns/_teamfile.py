"""Declarative teams: a TOML file names agents and a tree of patterns over them.

::

    root = "desk"                      # the member the team runs

    [agents.billing]                   # any agent of the registry
    agent = "simple"
    system_prompt = "You handle payments and refunds."

    [agents.tech]
    agent = "orchestrator"
    tools = ["calculator"]

    [patterns.desk]                    # a pattern over agents and other patterns
    pattern = "router"
    routes = ["billing", "tech"]
    descriptions = { billing = "payments", tech = "bugs and errors" }
    fallback = "tech"

Every error names the file's line (``team.toml:12: ...``). :meth:`TeamFile.to_toml`
writes a team back in this format; reading it again gives the same team. Standard
library only: the CLI checks a team file before anything heavy loads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import UsageError

__all__ = ["AGENT_FIELDS", "MAX_TEAM_BYTES", "PATTERN_FIELDS", "TeamFile", "parse_team"]

MAX_TEAM_BYTES = 64 * 1024

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")

# Field: (type, required). Types: "str", "int", "float", "bool", "names" (members
# of this team), "name" (one member), "strs" (a list of text), "table" (name -> text).
AGENT_FIELDS: dict[str, tuple[str, bool]] = {
    "agent": ("str", True),
    "model": ("str", False),
    "system_prompt": ("str", False),
    "tools": ("strs", False),
    "temperature": ("float", False),
    "max_tokens": ("int", False),
    "max_turns": ("int", False),
}

PATTERN_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {
    "router": {"routes": ("names", True), "descriptions": ("table", False),
               "fallback": ("name", False), "model": ("str", False)},
    "parallel": {"members": ("names", True), "mode": ("str", False),
                 "synthesizer": ("name", False), "timeout": ("float", False)},
    "supervisor": {"workers": ("names", True), "system_prompt": ("str", False),
                   "max_turns": ("int", False), "model": ("str", False)},
    "network": {"peers": ("names", True), "rounds": ("int", False),
                "synthesizer": ("name", False)},
    "hierarchical": {"departments": ("names", True), "descriptions": ("table", False),
                     "system_prompt": ("str", False), "model": ("str", False)},
    "reflective": {"actor": ("name", True), "critic": ("name", True),
                   "max_rounds": ("int", False)},
    "debate": {"debaters": ("names", True), "judge": ("name", True), "rounds": ("int", False)},
    "plan_and_execute": {"executors": ("names", True), "descriptions": ("table", False),
                         "max_replans": ("int", False), "model": ("str", False)},
    "planned": {"member": ("name", True), "always": ("bool", False),
                "min_complexity": ("int", False), "max_replans": ("int", False),
                "model": ("str", False)},
    "team_lead": {"members": ("names", True), "strategy": ("str", False),
                  "max_assignments": ("int", False), "model": ("str", False)},
    "handoffs": {"agent": ("name", True), "targets": ("names", True)},
    "tool_plan": {"tools": ("strs", True), "model": ("str", False)},
}  # fmt: skip

_CHOICES = {
    ("parallel", "mode"): ("all", "first", "synthesize"),
    ("team_lead", "strategy"): ("sequential", "parallel", "dynamic"),
}


@dataclass(frozen=True, slots=True)
class TeamFile:
    root: str
    agents: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    patterns: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def members_of(self, name: str) -> list[str]:
        """The members a pattern refers to, in the order it names them."""
        spec = self.patterns.get(name, {})
        fields = PATTERN_FIELDS.get(str(spec.get("pattern")), {})
        found: list[str] = []
        for key, (kind, _) in fields.items():
            value = spec.get(key)
            if kind == "name" and isinstance(value, str):
                found.append(value)
            elif kind == "names" and isinstance(value, list):
                found.extend(value)
        return found

    def to_toml(self) -> str:
        lines = [f"root = {_value(self.root)}"]
        for section, tables in (("agents", self.agents), ("patterns", self.patterns)):
            for name, table in tables.items():
                lines += ["", f"[{section}.{name}]"]
                lines += [f"{key} = {_value(value)}" for key, value in table.items()]
        return "\n".join(lines) + "\n"


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string is JSON's
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to a team file")


def _key(key: str) -> str:
    return key if _NAME.match(key) else json.dumps(key)


class _Lines:
    """Finds the line of a table or key, for error messages (tomllib gives none for
    values it parsed fine)."""

    def __init__(self, text: str) -> None:
        self.tables: dict[str, int] = {}
        self.keys: dict[tuple[str, str], int] = {}
        table = ""
        header = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
        keyline = re.compile(r"^\s*([A-Za-z0-9_-]+|\"[^\"]*\")\s*=")
        for number, line in enumerate(text.splitlines(), 1):
            match = header.match(line)
            if match:
                table = ".".join(part.strip().strip('"') for part in match.group(1).split("."))
                self.tables.setdefault(table, number)
                continue
            match = keyline.match(line)
            if match:
                self.keys.setdefault((table, match.group(1).strip('"')), number)

    def of(self, table: str, key: str | None = None) -> int:
        if key is not None and (table, key) in self.keys:
            return self.keys[(table, key)]
        return self.tables.get(table, 1)


def parse_team(text: str, source: str = "team") -> TeamFile:
    """A checked team from TOML ``text``; :class:`UsageError` names ``source`` and the
    line of what is wrong."""
    import tomllib

    if len(text.encode("utf-8", "replace")) > MAX_TEAM_BYTES:
        raise UsageError(f"{source}: a team file is at most {MAX_TEAM_BYTES // 1024} KiB")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        where = f"{source}:{line.group(1)}" if line else source
        raise UsageError(f"{where}: not valid TOML: {exc}") from None
    lines = _Lines(text)

    def fail(table: str, key: str | None, message: str) -> UsageError:
        return UsageError(f"{source}:{lines.of(table, key)}: {message}")

    unknown = set(data) - {"root", "agents", "patterns"}
    if unknown:
        key = min(unknown)
        raise fail("", key, f"unknown top-level key {key!r} (root, agents, patterns)")
    agents = _tables(data, "agents", fail)
    patterns = _tables(data, "patterns", fail)
    names = {*agents, *patterns}
    both = set(agents) & set(patterns)
    if both:
        name = min(both)
        raise fail(f"patterns.{name}", None, f"{name!r} is both an agent and a pattern")
    for name, table in agents.items():
        _check_fields(f"agents.{name}", table, AGENT_FIELDS, names, fail)
    for name, table in patterns.items():
        where = f"patterns.{name}"
        kind = table.get("pattern")
        if kind not in PATTERN_FIELDS:
            known = ", ".join(PATTERN_FIELDS)
            raise fail(where, "pattern", f"[{where}] pattern must be one of {known}")
        fields = {"pattern": ("str", True), **PATTERN_FIELDS[str(kind)]}
        _check_fields(where, table, fields, names, fail)
        for key, value in table.items():
            allowed = _CHOICES.get((str(kind), key))
            if allowed and value not in allowed:
                raise fail(where, key, f"[{where}] {key} must be one of {', '.join(allowed)}")
        if name in _refs(table, fields):
            raise fail(where, None, f"[{where}] refers to itself")
        if kind == "parallel":
            _check_synthesizer(where, table, fail)
    root = data.get("root")
    if not isinstance(root, str) or root not in names:
        raise fail("", "root", f"root must name an agent or pattern of this team, not {root!r}")
    team = TeamFile(root, agents, patterns)
    _refuse_cycles(team, lambda n: fail(f"patterns.{n}", None, f"[patterns.{n}] is in a cycle"))
    for name, table in patterns.items():
        if table["pattern"] == "handoffs" and table["agent"] not in agents:
            where = f"patterns.{name}"
            raise fail(where, "agent", f"[{where}] agent must name an agent, not a pattern")
    return team


def _check_synthesizer(where: str, table: Mapping[str, Any], fail: _Fail) -> None:
    """A parallel pattern has a synthesizer exactly when its mode is "synthesize" (the
    pattern refuses anything else when it runs: refused here, with the line, at submit)."""
    mode = table.get("mode", "all")
    if mode == "synthesize" and "synthesizer" not in table:
        raise fail(where, "mode", f'[{where}] mode = "synthesize" needs a synthesizer')
    if mode != "synthesize" and "synthesizer" in table:
        raise fail(
            where,
            "synthesizer",
            f"[{where}] synthesizer is used only with "
            f'mode = "synthesize" (the mode is {mode!r}): set the mode, or remove it',
        )


#: The error for a refused team file: (table, key, message); raised by the caller.
_Fail = Callable[[str, str | None, str], UsageError]


def _tables(data: Mapping[str, Any], section: str, fail: _Fail) -> dict[str, dict[str, Any]]:
    tables = data.get(section, {})
    if not isinstance(tables, dict):
        raise fail("", section, f"{section} must be a table of [{section}.NAME] tables")
    for name, table in tables.items():
        if not _NAME.match(name):
            raise fail(f"{section}.{name}", None, f"bad name {name!r} (letters, digits, _ and -)")
        if not isinstance(table, dict):
            raise fail(f"{section}.{name}", None, f"[{section}.{name}] must be a table")
    return {name: dict(table) for name, table in tables.items()}


def _refs(table: Mapping[str, Any], fields: Mapping[str, tuple[str, bool]]) -> list[str]:
    refs: list[str] = []
    for key, (kind, _) in fields.items():
        value = table.get(key)
        if kind == "name" and isinstance(value, str):
            refs.append(value)
        elif kind == "names" and isinstance(value, list):
            refs.extend(value)
    return refs


def _check_fields(
    where: str,
    table: Mapping[str, Any],
    fields: Mapping[str, tuple[str, bool]],
    names: set[str],
    fail: _Fail,
) -> None:
    for key in table:
        if key not in fields:
            raise fail(where, key, f"[{where}] unknown key {key!r} (known: {', '.join(fields)})")
    for key, (kind, required) in fields.items():
        if key not in table:
            if required:
                raise fail(where, None, f"[{where}] needs {key!r}")
            continue
        value = table[key]
        problem = _type_problem(kind, value, names)
        if problem:
            raise fail(where, key, f"[{where}] {key}: {problem}")


def _type_problem(kind: str, value: object, names: set[str]) -> str:
    if kind == "str":
        return "" if isinstance(value, str) else "must be text"
    if kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return "" if ok else "must be a whole number, 0 or more"
    if kind == "float":
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        return "" if ok else "must be a number, 0 or more"
    if kind == "bool":
        return "" if isinstance(value, bool) else "must be true or false"
    if kind == "strs":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return "" if ok else "must be a list of text"
    if kind == "table":
        ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
        return "" if ok else "must be a table of text"
    if kind == "name":
        if not isinstance(value, str):
            return "must name a member"
        return "" if value in names else f"no agent or pattern named {value!r}"
    if kind == "names":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            return "must be a list of member names, at least one"
        unknown = [v for v in value if v not in names]
        if unknown:
            return f"no agent or pattern named {unknown[0]!r}"
        if len(set(value)) != len(value):
            return "names a member twice"
        return ""
    raise AssertionError(kind)  # the field tables above use only these kinds


def _refuse_cycles(team: TeamFile, fail: Callable[[str], UsageError]) -> None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str) -> None:
        if name not in team.patterns or state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise fail(name)
        state[name] = 1
        for child in team.members_of(name):
            visit(child)
        state[name] = 2

    for name in team.patterns:
        visit(name)
