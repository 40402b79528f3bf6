"""AgentSpec: a typed, JSON-able description of one run.

It is what ``jarvis ask`` and ``jarvis task submit`` build, what the daemon stores in
SQLite and what crosses every wire. Loose input (relative paths, the caller's
environment) is turned into plain values once, at the edge, by :meth:`AgentSpec.at_edge`:
whoever runs the spec later (the daemon, a worker, a container) has another working
directory and another environment, and must see what the caller meant.

Standard library only: the daemon client imports this module, and must stay light.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from .._errors import UsageError

__all__ = ["ENGINE_ENV", "ISOLATIONS", "AgentSpec", "Isolation"]

#: Where a run's agent runs: "sandbox" (``--sandbox``: in a sandbox of jarvis's), "host"
#: (``--no-sandbox``: an external agent on the host, not in its own sandbox), "default"
#: (the agent's own choice: built-in agents on the host, external agents sandboxed).
Isolation = Literal["sandbox", "host", "default"]
ISOLATIONS: tuple[Isolation, ...] = get_args(Isolation)
#: The fields ``isolation`` replaced, as specs stored by older versions (the daemon's
#: durable tasks) and older clients still send them: the flag and what it meant.
_OLD_ISOLATION_FLAGS: dict[str, Isolation] = {"sandbox": "sandbox", "no_sandbox": "host"}

#: Environment variables that choose where an engine is. They travel in the spec, so a
#: daemon started in another environment still uses the caller's engine. Secrets (API
#: keys) never travel: the daemon reads those from its own environment.
ENGINE_ENV = ("OLLAMA_HOST",)


@dataclass(frozen=True, slots=True)
class AgentSpec:
    input: str
    agent: str = ""  # empty: config agent.default
    engine: str | None = None  # None: config / auto
    model: str = ""
    tools: tuple[str, ...] = ()
    isolation: Isolation = "default"
    mounts: tuple[str, ...] = ()  # "PATH" or "PATH:rw", absolute once at_edge ran
    context_file: str | None = None  # given to the agent as metadata["context"] (rlm)
    temperature: float | None = None
    max_tokens: int | None = None
    max_turns: int | None = None
    system_prompt: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)  # the agent's declared options
    #: The caller's engine-selecting environment (names in ENGINE_ENV).
    env: Mapping[str, str] = field(default_factory=dict)
    #: Budgets for the whole run, nested agents included (None: the config's).
    max_tokens_total: int | None = None
    max_calls: int | None = None
    max_tool_calls: int | None = None
    max_wall: float | None = None
    #: A team (TOML text, see jarvisd.patterns): the run is the team, not ``agent``.
    #: The text travels, not the path: whoever runs the spec may not see the file.
    team: str | None = None
    #: A ``jarvis code`` workspace id: the run is then the agent working on it
    #: (``jarvisd.code.run_code``: sandboxed, the workspace mounted read-write).
    workspace: str | None = None
    #: Hosts the run's sandbox may reach besides the config's (``--allow-net``; entries
    #: as in ``[sandbox.network] allow``). Stored with a task, so a restart keeps them.
    allow_net: tuple[str, ...] = ()
    #: Node labels ("KEY=VALUE") the run's node must have on a cluster
    #: (``--node-label``; ``jarvisd.cluster``); ignored by the local backend.
    node_labels: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """What the spec runs (``jarvisd.runs._kinds.KINDS``): a ``jarvis code``
        "workspace", a "team", else an "agent"."""
        if self.workspace:
            return "workspace"
        return "team" if self.team is not None else "agent"

    def at_edge(self, environ: Mapping[str, str] | None = None) -> AgentSpec:
        """This spec as the caller means it anywhere: paths absolute (from this
        process's working directory), the engine-selecting environment captured."""
        environ = os.environ if environ is None else environ
        env = dict(self.env)
        for name in ENGINE_ENV:
            if name not in env and environ.get(name):
                env[name] = environ[name]
        context = self.context_file
        return dataclasses.replace(
            self,
            mounts=tuple(_absolute_mount(m) for m in self.mounts),
            context_file=None if context is None else _absolute(context),
            env=env,
        )

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["tools"] = list(self.tools)
        data["mounts"] = list(self.mounts)
        data["allow_net"] = list(self.allow_net)
        data["node_labels"] = list(self.node_labels)
        data["options"] = dict(self.options)
        data["env"] = dict(self.env)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> AgentSpec:
        """Parse a spec from the wire; raises UsageError naming the bad field."""
        known = {f.name for f in dataclasses.fields(cls)} | set(_OLD_ISOLATION_FLAGS)
        unknown = set(data) - known
        if unknown:
            raise UsageError(f"unknown agent spec fields: {', '.join(sorted(unknown))}")
        values: dict[str, Any] = dict(data)  # checked field by field below
        _isolation(values)
        _check(values, "input", str, required=True)
        for name in ("agent", "model"):
            _check(values, name, str)
        for name in ("engine", "context_file", "system_prompt", "team", "workspace"):
            _check(values, name, str, optional=True)
        for name in ("max_tokens", "max_turns", "max_tokens_total", "max_calls", "max_tool_calls"):
            _check(values, name, int, optional=True)
        for name in ("temperature", "max_wall"):
            _check(values, name, (int, float), optional=True)
        for name in ("tools", "mounts", "allow_net", "node_labels"):
            items = values.get(name) or ()
            if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
                raise UsageError(f"agent spec field {name!r} must be a list of strings")
            values[name] = tuple(items)
        for name in ("options", "env"):
            mapping = values.get(name) or {}
            if not isinstance(mapping, Mapping) or not all(isinstance(k, str) for k in mapping):
                raise UsageError(f"agent spec field {name!r} must be an object")
            values[name] = dict(mapping)
        if not all(isinstance(v, str) for v in values["env"].values()):
            raise UsageError("agent spec field 'env' must map names to strings")
        if values.get("team") is not None and values.get("workspace"):
            # One kind of run: a jarvis code workspace runs one agent, never a team.
            raise UsageError("agent spec fields 'team' and 'workspace' are two kinds of run")
        return cls(**values)


def _isolation(values: dict[str, object]) -> None:
    """Check ``isolation``, and turn the flags it replaced into it (in place). The pair
    of old flags contradicts itself, as does an old flag against ``isolation``: specs
    arrive on the daemon's socket from any client, and which wins is never a guess."""
    meant: dict[str, Isolation] = {}
    for name, isolation in _OLD_ISOLATION_FLAGS.items():
        _check(values, name, bool)
        if values.pop(name, False):
            meant[name] = isolation
    if len(meant) > 1:
        raise UsageError("agent spec fields 'sandbox' and 'no_sandbox' contradict each other")
    given = values.get("isolation", "default")
    if given not in ISOLATIONS:
        raise UsageError(
            f"agent spec field 'isolation' must be one of {', '.join(ISOLATIONS)} (not {given!r})"
        )
    for name, isolation in meant.items():
        if given not in ("default", isolation):
            raise UsageError(f"agent spec fields {name!r} and 'isolation' contradict each other")
        values["isolation"] = isolation


def _check(
    values: Mapping[str, object],
    name: str,
    kind: type | tuple[type, ...],
    *,
    required: bool = False,
    optional: bool = False,
) -> None:
    if name not in values:
        if required:
            raise UsageError(f"agent spec needs an {name!r} field")
        return
    value = values[name]
    if value is None and optional:
        return
    # bool is an int in Python, but never a count or a temperature here.
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise UsageError(f"agent spec field {name!r} has the wrong type ({type(value).__name__})")


def _absolute(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def _absolute_mount(mount: str) -> str:
    path, sep, mode = mount.rpartition(":")
    if sep and mode in ("rw", "ro"):
        return _absolute(path) + ":" + mode
    return _absolute(mount)
