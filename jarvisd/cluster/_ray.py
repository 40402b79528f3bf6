"""The ray backend, on the daemon's side: one long-lived driver child process
(``_driver``, started at the first ray task and again if it died) runs every task's
worker on a Ray node; each task's worker, as the daemon sees it, is a stub process
(``_stub``) joined to the driver. A ``jarvis code`` run, and any task while the cluster
is down, has a relay of its own instead (``_relay``: the workspace, the fallback).
Ray itself is imported only in the driver and relays, so the daemon's start-up and
memory do not carry it."""

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

from ._placement import NodeInfo, labels, needs, unmet

if TYPE_CHECKING:
    from jarvisd._config import Config
    from jarvisd.runs import AgentSpec

__all__ = ["RayBackend"]

log = logging.getLogger(__name__)

RELAY_MODULE = "jarvisd.cluster._relay"
DRIVER_MODULE = "jarvisd.cluster._driver"
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
            [python, "-m", DRIVER_MODULE, self.address, self._socket],
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
        relay_args = [
            self.address,
            json.dumps(needs(spec, config), sort_keys=True),
            json.dumps(labels(spec, config), sort_keys=True),
            self._fallback(config),
            spec.workspace or "",  # a jarvis code run: its workspace travels (_carry)
        ]
        # The shared driver, through a stub; a task of its own relay when its workspace
        # travels, or when the cluster was found down moments ago (its fallback).
        own_relay = bool(spec.workspace) or relay_args[3].endswith("-now")
        command = (
            [python, "-m", RELAY_MODULE, *relay_args]
            if own_relay
            else [python, "-I", "-S", STUB_SCRIPT, self.driver.socket(python), *relay_args]
        )
        return await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=limit,
        )

    def __init__(self, address: str = "auto") -> None:
        self.address = address
        self.driver = Driver(address)
        self._nodes: list[NodeInfo] | None = None
        self._probed = 0.0
        self._lock = threading.Lock()
        self._why = ""  # why the last listing failed

    def _fallback(self, config: Config) -> str:
        """The relay's mode when the cluster cannot be reached (``_fallback``): with
        "-now" when it was found down moments ago, so the relay does not try first."""
        mode = config.cluster.fallback
        with self._lock:
            down = self._probed and self._nodes is None
            if down and time.monotonic() - self._probed < _PROBE_TTL_S:
                return f"{mode}-now"
        return mode

    def check(self, spec: AgentSpec, config: Config) -> str:
        """Refuse a task no live node has the resources for. A cluster that cannot be
        reached refuses nothing: the task waits for it, or runs here with ``[cluster]
        fallback = "local"``; what is returned says which (the submit's notice)."""
        wanted, where = needs(spec, config), labels(spec, config)  # a bad label: refused
        nodes = self._live_nodes(config)
        if nodes is None:
            then = (
                'the task runs on this machine ([cluster] fallback = "local")'
                if config.cluster.fallback == "local"
                else "the task waits until it can"
            )
            return f"the Ray cluster at {self.address} cannot be reached ({self._why}): {then}"
        why = unmet(wanted, nodes, where)
        if why:
            raise UsageError(
                f"{why}: start a node that has them (ray start --resources ...), or ask for less"
            )
        return ""

    def _live_nodes(self, config: Config) -> list[NodeInfo] | None:
        """The live nodes' resources (None: the cluster did not answer), asked of the
        cluster at most every few seconds: a burst of submits costs one probe."""
        with self._lock:
            if self._probed and time.monotonic() - self._probed < _PROBE_TTL_S:
                return self._nodes  # None too: an unreachable cluster is not asked again
            self._nodes = self._probe()
            self._probed = time.monotonic()
            return self._nodes

    def _probe(self) -> list[NodeInfo] | None:
        try:
            done = subprocess.run(
                [sys.executable, "-m", PROBE_MODULE, self.address],
                capture_output=True,
                text=True,
                timeout=_PROBE_TIMEOUT_S,
                check=False,
            )
            if done.returncode == 0:
                return [NodeInfo.from_dict(n) for n in json.loads(done.stdout)]
            why = done.stderr.strip()[-500:]
        except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
            why = str(exc)
        log.warning("cannot list the Ray cluster's nodes: %s", why)
        self._why = why.splitlines()[-1] if why else "no answer"
        return None
