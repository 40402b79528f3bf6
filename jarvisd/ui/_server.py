"""The console's listening socket: loopback only, started and stopped with jarvisd."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from jarvisd.http import HTTPServer

if TYPE_CHECKING:
    from jarvisd.daemon._server import Daemon

from ._app import Console

__all__ = ["ConsoleServer"]

log = logging.getLogger(__name__)


class ConsoleServer:
    """``start()`` binds 127.0.0.1:``port`` (0: any free port); a port in use is said in
    the log and the daemon goes on without its console."""

    def __init__(self, daemon: Daemon, port: int) -> None:
        self.console = Console(daemon)
        self.requested = port
        self._http = HTTPServer(self.console)
        self._server: asyncio.AbstractServer | None = None

    @property
    def port(self) -> int:
        return self.console.port

    async def start(self) -> bool:
        try:
            self._server = await asyncio.start_server(
                self._http.connection, "127.0.0.1", self.requested
            )
        except OSError as exc:
            log.warning(
                "web console not started: 127.0.0.1:%d: %s ([ui] port)",
                self.requested,
                exc.strerror or exc,
            )
            return False
        self.console.port = self._server.sockets[0].getsockname()[1]
        log.info("web console on http://127.0.0.1:%d/ (`jarvis ui` opens it)", self.port)
        return True

    def login_url(self) -> str:
        return self.console.login_url()

    async def aclose(self) -> None:
        await self.console.installs.aclose()
        if self._server is not None:
            self._server.close()
            await self._http.aclose()
            self._server = None
