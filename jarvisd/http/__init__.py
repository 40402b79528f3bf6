"""jarvis's one HTTP server.

:class:`HTTPServer` (``_server``) is HTTP/1.1 on asyncio streams, parsed by h11, with
bounded heads and bodies and a hostile-until-admitted view of every client. What it
serves is an :class:`App`: one required method, ``handle``, and two optional hooks
(``admit`` a request's head before its body is read, ``refuse`` in the app's own error
format). The apps:

- the inference gateway's dialects and its ``/mcp`` (``jarvisd.gateway.Gateway``);
- the Ollama and OpenAI APIs of ``jarvis serve-model`` and ``jarvis serve``, with agents
  and teams as models (``jarvisd.http.serve``: it runs agents, so it sits in the serving
  layer, while this package sits low enough for the gateway to build on it);
- the web console (``jarvisd.ui.Console``).

``Allowlist`` is the Host/Origin check the local servers share (no DNS rebinding, no
foreign web page). The server alone imports no engine.
"""

from __future__ import annotations

from ._allow import Allowlist
from ._server import App, Hangup, HTTPServer, Request, Response

__all__ = ["Allowlist", "App", "HTTPServer", "Hangup", "Request", "Response"]
