"""jarvis's one HTTP server, and the apps it serves.

:class:`HTTPServer` (``_server``) is HTTP/1.1 on asyncio streams, parsed by h11, with
bounded heads and bodies and a hostile-until-admitted view of every client. What it
serves is an :class:`App`: one required method, ``handle``, and two optional hooks
(``admit`` a request's head before its body is read, ``refuse`` in the app's own error
format). The apps:

- the inference gateway's dialects and its ``/mcp`` (``jarvisd.gateway.Gateway``);
- the Ollama and OpenAI APIs of ``jarvis serve-model`` and ``jarvis serve``
  (:class:`OllamaServer`, with agents and teams as models: :class:`ServedAgents`);
- the web console (``jarvisd.ui.Console``).

``Allowlist`` is the Host/Origin check the local servers share (no DNS rebinding, no
foreign web page). Names load on first use: the server alone imports no engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr
from ._allow import Allowlist
from ._server import App, Hangup, HTTPServer, Request, Response

if TYPE_CHECKING:
    from ._agents import ServedAgents
    from ._ollama import OllamaServer

_LAZY = {"OllamaServer": "._ollama", "ServedAgents": "._agents"}

__all__ = [
    "Allowlist",
    "App",
    "HTTPServer",
    "Hangup",
    "OllamaServer",
    "Request",
    "Response",
    "ServedAgents",
]

__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
