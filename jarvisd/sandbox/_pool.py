"""Warm start: a pool of started sandbox containers, their program (the code agents'
REPL) already imported and waiting on stdin, so that a session's first cell costs an
attach and two frames instead of a container's create and start and Python's imports.

Config ``sandbox.warm_pool = N`` (0, the default, turns it off). Containers are created
and started for one exact container configuration (image, command, environment, limits,
the read-only mounts of jarvis's own code): a request that needs nothing else (no
files, no mounts, no environment of its own: the code agents' REPL session, whose
run-specific input all arrives in its ``start`` frame) takes one, and a background
thread starts the next. The pool attaches to each right after its start and hands the
taker the container with its attach socket (:class:`Pooled`): a take makes no engine
call at all. The program writes nothing before its first frame, so an idle container's
socket that turns readable has ended (its process died, someone removed it): the take
drops it and looks at the next. ``StdinOnce`` closes the program's stdin when that
socket is closed, as for any container. A taken container is the
run's like any other: removed at the end of the run, never handed out again, so a run
sees nothing of an earlier one. Pooled containers carry the sandbox label and the owner
label, so the orphan sweep removes them once their process is gone; a process removes
its own at exit.

Pools outlive the executors (one per run), so each process keeps one pool per engine
here, created on first use.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import select
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["POOL_LABEL", "Pooled", "WarmPool", "close_pools", "warm_pool"]

log = logging.getLogger(__name__)

#: Pooled containers also carry this label (value "1"), to tell them apart in listings.
POOL_LABEL = "jarvis.sandbox.pool"
#: Configurations a pool keeps containers for at once: the oldest one's go first.
MAX_CONFIGS = 2

_pools: dict[tuple[str, str], WarmPool] = {}
_pools_lock = threading.Lock()


def _key(config: Mapping[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


@dataclass(frozen=True, slots=True)
class Pooled:
    """A started pooled container and the attach socket to its stdin and output."""

    id: str
    sock: Any
    #: Its stdin's own stream, over TLS (``_docker.attach_streams``), else None.
    stdin_sock: Any = None

    @property
    def raw(self) -> socket.socket:
        return getattr(self.sock, "_sock", self.sock)  # type: ignore[no-any-return]

    def ended(self) -> bool:
        """Whether its program is gone: it says nothing before the first frame, so
        anything to read (EOF) means it ended."""
        try:
            return bool(select.select([self.raw], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.raw.shutdown(socket.SHUT_RDWR)
        response = getattr(self.sock, "_response", None)
        if response is not None:
            with contextlib.suppress(OSError, ValueError):
                response.close()
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.stdin_sock is not None:
            with contextlib.suppress(OSError):
                self.stdin_sock.close()


#: Attaches to a created container: (its stream, its stdin's own stream or None).
Attach = Callable[[Any, str], tuple[Any, Any]]


class WarmPool:
    """Up to ``size`` started (and attached) containers per configuration."""

    def __init__(self, api: Any, size: int, attach: Attach) -> None:
        self.api = api
        self.attach = attach
        self.size = size
        self._lock = threading.Lock()
        self._configs: dict[str, Mapping[str, Any]] = {}  # oldest first
        self._ready: dict[str, list[Pooled]] = {}
        self._filling = False
        self._filler: threading.Thread | None = None
        self._closed = False

    def ready(self) -> list[str]:
        """The ids of the containers waiting to be taken."""
        with self._lock:
            return [p.id for ready in self._ready.values() for p in ready]

    def prime(self, config: Mapping[str, Any]) -> None:
        """Keep containers of ``config`` ready (started in the background)."""
        self._want(_key(config), config)
        self._refill()

    def take(self, config: Mapping[str, Any]) -> Pooled | None:
        """A ready container of ``config``, now the caller's alone (None: start one
        yourself); the pool starts the next in the background."""
        key = _key(config)
        self._want(key, config)
        found, dead = None, []
        with self._lock:
            ready = self._ready.get(key) or []
            while ready and found is None:
                candidate = ready.pop(0)  # out of the pool before anyone else looks
                if candidate.ended():
                    dead.append(candidate)
                else:
                    found = candidate
        if dead:
            log.info("warm pool: %d container(s) had ended; dropped", len(dead))
            self._remove(dead)
        self._refill()
        return found

    def _want(self, key: str, config: Mapping[str, Any]) -> None:
        dropped: list[Pooled] = []
        with self._lock:
            self._configs.pop(key, None)
            self._configs[key] = config
            while len(self._configs) > MAX_CONFIGS:
                oldest = next(iter(self._configs))
                del self._configs[oldest]
                dropped += self._ready.pop(oldest, [])
        self._remove(dropped)

    def _refill(self) -> None:
        with self._lock:
            if self._filling or self._closed:
                return
            self._filling = True
            self._filler = threading.Thread(target=self._fill, name="sandbox-pool", daemon=True)
            self._filler.start()

    def _fill(self) -> None:
        import docker.errors
        import requests.exceptions

        try:
            while True:
                with self._lock:
                    short = [k for k in self._configs if len(self._ready.get(k, ())) < self.size]
                    if not short or self._closed:
                        # Under the lock: a take from now on starts a new fill.
                        self._filling = False
                        return
                    key, config = short[0], self._configs[short[0]]
                labelled = {**config, "Labels": {**config.get("Labels", {}), POOL_LABEL: "1"}}
                created, sock, stdin_sock = "", None, None
                try:
                    created = self.api.create_container_from_config(labelled, None)["Id"]
                    # Attached before the start, as any sandbox container: its first
                    # attach is the one StdinOnce ties the program's stdin to.
                    sock, stdin_sock = self.attach(self.api, created)
                    self.api.start(created)
                except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
                    # Only a head start lost: a run then starts its own container.
                    log.warning("warm pool: cannot start a sandbox container: %s", exc)
                    if created:
                        self._remove([Pooled(created, sock, stdin_sock)])
                    break
                with self._lock:
                    keep = not self._closed and key in self._configs
                    if keep:
                        self._ready.setdefault(key, []).append(Pooled(created, sock, stdin_sock))
                if not keep:
                    self._remove([Pooled(created, sock, stdin_sock)])
        finally:
            with self._lock:
                self._filling = False

    def _remove(self, pooled: list[Pooled]) -> None:
        import docker.errors
        import requests.exceptions

        for container in pooled:
            if container.sock is not None:  # first: a removal with the stream open can hang
                container.close()
            with contextlib.suppress(
                docker.errors.DockerException, requests.exceptions.RequestException
            ):
                self.api.remove_container(container.id, force=True)

    def close(self, wait: float = 30.0) -> None:
        """Remove the containers still waiting; the pool creates no more. A container
        being started meanwhile is removed by its filler, waited for up to ``wait``
        seconds (each of its engine calls is bounded): a process that leaves right after
        leaves none behind."""
        with self._lock:
            self._closed = True
            idle = [p for ready in self._ready.values() for p in ready]
            self._ready.clear()
            filler = self._filler
        self._remove(idle)
        if filler is not None and filler is not threading.current_thread():
            filler.join(wait)


def warm_pool(address: str, flavor: str, size: int, connect: Any, attach: Attach) -> WarmPool:
    """This process's pool for the engine at ``address`` (``connect()`` gives it its own
    client the first time)."""
    with _pools_lock:
        pool = _pools.get((address, flavor))
        if pool is None:
            if not _pools:
                atexit.register(close_pools)
            pool = _pools[(address, flavor)] = WarmPool(connect().api, size, attach)
        pool.size = size
        return pool


def close_pools() -> None:
    """Remove every pooled container of this process (at exit, and for tests)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()
        with contextlib.suppress(Exception):
            pool.api.close()
