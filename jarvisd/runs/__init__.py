"""Runs: the one place where a run is described, wired together and reported.

- :class:`AgentSpec` describes a run (typed, JSON-able; made absolute at the edge);
- :func:`run_spec` runs it and returns a :class:`RunOutcome`, the one result shape on
  every wire, with a :class:`Failure` code from the one table (:func:`to_wire`,
  :func:`from_wire`) when it did not answer;
- a :class:`Host` (``LocalHost``; ``jarvisd.daemon.DaemonHost``) decides where a run
  happens.

Below ``cli/`` and ``daemon/``, above agents and engines. Names load on first use: the
daemon client needs the spec and the outcome, not the agents behind ``run_spec``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr

if TYPE_CHECKING:
    from ._build import BuildOptions, build_agent, validate_spec
    from ._execute import run_spec
    from ._failures import exit_code, from_wire, to_wire
    from ._hosts import Host, LocalHost
    from ._options import Option, declared_options, parse_option_flags
    from ._outcome import Failure, RunOutcome
    from ._sandboxed import SandboxedAgent
    from ._spec import ENGINE_ENV, AgentSpec

_LAZY = {
    "BuildOptions": "._build",
    "ENGINE_ENV": "._spec",
    "AgentSpec": "._spec",
    "Failure": "._outcome",
    "Host": "._hosts",
    "LocalHost": "._hosts",
    "Option": "._options",
    "RunOutcome": "._outcome",
    "SandboxedAgent": "._sandboxed",
    "build_agent": "._build",
    "declared_options": "._options",
    "exit_code": "._failures",
    "from_wire": "._failures",
    "parse_option_flags": "._options",
    "run_spec": "._execute",
    "to_wire": "._failures",
    "validate_spec": "._build",
}

__all__ = [
    "ENGINE_ENV",
    "AgentSpec",
    "BuildOptions",
    "Failure",
    "Host",
    "LocalHost",
    "Option",
    "RunOutcome",
    "SandboxedAgent",
    "build_agent",
    "declared_options",
    "exit_code",
    "from_wire",
    "parse_option_flags",
    "run_spec",
    "to_wire",
    "validate_spec",
]


__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
