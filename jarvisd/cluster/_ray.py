"""The ray backend, on the daemon's side: one long-lived driver child process
(``_relay``, started at the first ray task and again if it died) runs every task's
worker on a Ray node; each task's worker, as the daemon sees it, is a stub process
(``_stub``) joined to the driver. Ray itself is imported only in the driver, so the
daemon's start-up and memory do not carry it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from jarvisd._errors import UsageError

from ._placement import needs, unmet

if TYPE_CHECKING:
    from jarvisd._config import Config
    from jarvisd.runs import AgentSpec

__all__ = ["RayBackend"]

log = logging.getLogger(__name__)

RELAY_MODULE = "jarvisd.cluster._relay"
#: Run as a script of the standard library alone (``-I -S``): it starts in milliseconds.
STUB_SCRIPT = str(Path(__file__).with_name("_stub.py"))
PROBE_MODULE = "jarvisd.cluster._probe"
#: Seconds a listing of the cluster's nodes is reused; and one may take at most.
_PROBE_TTL_S = 10.0
#: (A submit waits for it: bounded well below a client's patience.)
_PROBE_TIMEOUT_S = 15.0


class Driver:
    """The daemon's one Ray driver process: started at the first use, again whenever
    it has died. It listens on a socket in a directory only this user can enter, and
    leaves when its stdin, a pipe held here, ends (the daemon died)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._proc: subprocess.Popen[bytes] | None = None
        self._socket = ""

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def socket(self, python: str) -> str:
        """The socket of a running driver (started now when there is none)."""
        if self._proc is not None and self._proc.poll() is None:
            return self._socket
        if self._proc is not None:
            log.warning("the Ray driver ended (%s): starting another", self._proc.returncode)
            # It could not clean up after itself (it left on its stdin's end only).
            with contextlib.suppress(OSError):
                os.unlink(self._socket)
                os.rmdir(os.path.dirname(self._socket))
        # A short path (a socket's is bounded), private: mkdtemp makes it 0700.
        self._socket = os.path.join(tempfile.mkdtemp(prefix="jarvis-ray-"), "driver.sock")
        self._proc = subprocess.Popen(
            [python, "-m", RELAY_MODULE, self.address, self._socket],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # a task's kill never reaches it, nor the terminal's ^C
        )
        return self._socket


class RayBackend:
    """Tasks on the Ray cluster at ``[cluster] address``."""

    name = "ray"

    async def spawn(
        self, python: str, spec: AgentSpec, config: Config, limit: int
    ) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            python,
            "-I",
            "-S",
            STUB_SCRIPT,
            self.driver.socket(python),
            json.dumps(needs(spec, config), sort_keys=True),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=limit,
        )

    def __init__(self, address: str = "auto") -> None:
        self.address = address
        self.driver = Driver(address)
        self._nodes: list[dict[str, float]] | None = None
        self._probed = 0.0
        self._lock = threading.Lock()

    def check(self, spec: AgentSpec, config: Config) -> None:
        """Refuse a task no live node has the resources for. A cluster that cannot be
        reached refuses nothing: the task waits in the queue, and its run says why."""
        nodes = self._live_nodes(config)
        if nodes is None:
            return
        why = unmet(needs(spec, config), nodes)
        if why:
            raise UsageError(
                f"{why}: start a node that has them (ray start --resources ...), or ask for less"
            )

    def _live_nodes(self, config: Config) -> list[dict[str, float]] | None:
        """The live nodes' resources (None: the cluster did not answer), asked of the
        cluster at most every few seconds: a burst of submits costs one probe."""
        with self._lock:
            if self._probed and time.monotonic() - self._probed < _PROBE_TTL_S:
                return self._nodes  # None too: an unreachable cluster is not asked again
            self._nodes = self._probe()
            self._probed = time.monotonic()
            return self._nodes

    def _probe(self) -> list[dict[str, float]] | None:
        try:
            done = subprocess.run(
                [sys.executable, "-m", PROBE_MODULE, self.address],
                capture_output=True,
                text=True,
                timeout=_PROBE_TIMEOUT_S,
                check=False,
            )
            if done.returncode == 0:
                nodes: list[dict[str, float]] = json.loads(done.stdout)
                return nodes
            why = done.stderr.strip()[-500:]
        except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
            why = str(exc)
        log.warning("cannot list the Ray cluster's nodes: %s", why)
        return None
