"""The local web console (``jarvis ui``): tasks live, approvals, code review and apply,
traces drawn, benchmarks; served by jarvisd on a loopback port.

Server-rendered HTML, a vendored htmx for partial updates, server-sent events for live
ones; no Node build step and no second web framework (it is an ``App`` of the h11
server in ``jarvisd.http``). See ``_app`` for who may ask what.
"""

from __future__ import annotations

from ._app import CSP, Console
from ._server import ConsoleServer

__all__ = ["CSP", "Console", "ConsoleServer"]
