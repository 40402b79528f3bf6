"""``OllamaStandIn``: the real Ollama-protocol server on a free loopback port, which
also records the requests it parsed so tests can look at what a client sent."""

from __future__ import annotations

import threading
from typing import Any

from ..engines import Engine, ScriptedEngine
from ..http.serve import OllamaServer

__all__ = ["OllamaStandIn"]


class OllamaStandIn(OllamaServer):
    """An :class:`OllamaServer` on a free loopback port (``port=0``); ``requests`` holds
    each parsed request body as ``(method, path, body)``, in arrival order."""

    def __init__(
        self, engine: Engine | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        super().__init__(engine if engine is not None else ScriptedEngine(), host, port)
        self.requests: list[tuple[str, str, Any]] = []
        self._lock = threading.Lock()

    def observe(self, method: str, path: str, body: dict[str, Any]) -> None:
        with self._lock:  # handlers run on the server's threads
            self.requests.append((method, path, body))
