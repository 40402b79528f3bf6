"""The daemon's warm pool, shared with its workers: started containers handed out across
processes, each to one run only.

A pool inside a task worker lives as long as its one task, so jarvisd keeps the pool
(``sandbox.warm_pool``) and its workers claim from it. The hand-over is a directory per
container configuration, private to the user (under the runtime directory): the keeper
(in jarvisd) starts a container, then publishes its id as a file in ``ready/``. A worker
claims one by renaming that file into ``taken/`` under a name that says who took it:
a rename succeeds for exactly one process, so a container is never handed to two runs,
whatever the number of workers racing. The taker then attaches to the running container
(its program has written nothing yet, and its stdin closes when the taker's attach
ends: ``StdinOnce``) and removes it at the end of its run, as any sandbox container.

The keeper refills ``ready/`` in the background, and watches ``taken/``: a container
whose taker died (kill -9) is removed, its file dropped. At its stop it claims what is
still ready (the same rename, so never one a worker just took) and removes it. Pooled
containers carry the keeper's owner label: the orphan sweep removes them once the
daemon is gone.

Only a configuration with nothing run-specific is pooled (``_docker.poolable``), and
the configuration is compared without its owner labels: a worker whose config differs
(another image, other limits) finds no directory and starts its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._errors import JarvisError
from .._procs import pid_alive
from ._engine import _owner
from ._policy import OWNER_LABEL
from ._pool import POOL_LABEL

__all__ = ["PoolKeeper", "claim", "handout_dir", "kept"]

log = logging.getLogger(__name__)

#: How often the keeper looks at its directory (a claim is seen this late at most).
TICK_S = 0.2
#: How often it asks whether the takers of claimed containers are still alive.
CHECK_TAKEN_EVERY_S = 2.0
#: How long the keeper waits after a container it could not start.
RETRY_AFTER_FAILURE_S = 5.0
_ID = re.compile(r"^[0-9a-f]{64}$")


def _shared_key(address: str, config: Mapping[str, Any]) -> str:
    labels = {
        k: v for k, v in (config.get("Labels") or {}).items() if k not in (OWNER_LABEL, POOL_LABEL)
    }
    text = json.dumps({**config, "Labels": labels}, sort_keys=True, default=str)
    return hashlib.sha256(f"{address}\n{text}".encode()).hexdigest()[:24]


def handout_dir(address: str, config: Mapping[str, Any]) -> Path:
    """The directory where containers of ``config`` on the engine at ``address`` wait."""
    from .._paths import paths

    return paths().runtime / "sandbox-pool" / _shared_key(address, config)


def claim(directory: Path) -> str | None:
    """A ready container id from ``directory``, now this process's alone, or None."""
    try:
        names = sorted(os.listdir(directory / "ready"))
    except OSError:
        return None
    taker = f"{socket.gethostname()}:{os.getpid()}"
    for name in names:
        if not _ID.match(name):
            continue
        try:  # exactly one rename of a file succeeds: that process has the container
            os.rename(directory / "ready" / name, directory / "taken" / f"{name}@{taker}")
        except OSError:
            continue
        return name
    return None


def kept(directory: Path) -> bool:
    """Whether a live keeper fills ``directory`` (then a worker keeps no pool of its own)."""
    try:
        keeper = (directory / "keeper").read_text()
    except OSError:
        return False
    host, _, pid = keeper.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and pid_alive(int(pid))


class PoolKeeper:
    """Keeps ``size`` started containers of ``config`` in ``directory`` (jarvisd's).

    ``make``: starts one container itself and returns its id (raising the engine's
    errors), for containers that are not all alike (an external agent's slot, each
    with its own directories: ``jarvisd.external._agentpool``); ``forget(id)`` is then
    told of each container the keeper removes or sees removed, to drop what it made
    for it."""

    def __init__(
        self,
        api: Any,
        config: Mapping[str, Any],
        directory: Path,
        size: int,
        *,
        make: Callable[[], str] | None = None,
        forget: Callable[[str], None] | None = None,
    ) -> None:
        self.api = api
        self.config = {**config, "Labels": {**(config.get("Labels") or {}), POOL_LABEL: "1"}}
        self.directory = directory
        self.size = size
        self._make = make
        self._forget = forget
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def start(self) -> None:
        for sub in ("ready", "taken"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        self._drop_stale()
        (self.directory / "keeper").write_text(_owner())
        self._thread = threading.Thread(target=self._run, name="sandbox-pool-keeper", daemon=True)
        self._thread.start()

    def stop(self, wait: float = 30.0) -> None:
        """No more containers; those still ready are claimed back and removed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(wait)
        mine = []
        while (found := claim(self.directory)) is not None:
            mine.append(found)
        self._remove(mine)
        for path in (self.directory / "taken").glob(f"*@{_owner()}"):
            path.unlink(missing_ok=True)
        (self.directory / "keeper").unlink(missing_ok=True)

    def ready(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.directory / "ready") if _ID.match(n))
        except OSError:
            return []

    def _drop_stale(self) -> None:
        """Files a previous daemon left: their containers were swept with it."""
        for sub in ("ready", "taken"):
            for path in (self.directory / sub).iterdir():
                path.unlink(missing_ok=True)

    def _run(self) -> None:
        checked = 0.0
        while not self._stop.is_set():
            if len(self.ready()) < self.size:
                if not self._start_one():
                    self._stop.wait(RETRY_AFTER_FAILURE_S)  # the engine is down: only logged
                    continue
            else:
                self._stop.wait(TICK_S)
            if time.monotonic() - checked > CHECK_TAKEN_EVERY_S:
                checked = time.monotonic()
                self._check_taken()
                if self._make is not None:
                    self._check_ready()

    def _start_one(self) -> bool:
        import docker.errors
        import requests.exceptions

        created = ""
        # A maker's own failures too (an agent that never answered, a directory it could
        # not make): the keeper goes on, as when the engine is away.
        failures: tuple[type[BaseException], ...] = (
            docker.errors.DockerException,
            requests.exceptions.RequestException,
            *((JarvisError, OSError) if self._make is not None else ()),
        )
        try:
            if self._make is not None:
                created = self._make()
            else:
                created = self.api.create_container_from_config(self.config, None)["Id"]
                self.api.start(created)  # not attached: its taker attaches, in its own process
        except failures as exc:
            # Said once, not every few seconds, while the engine stays away.
            log.log(logging.DEBUG if self._failing else logging.WARNING,
                    "warm pool: cannot start a sandbox container: %s", exc)  # fmt: skip
            self._failing = True
            if created:
                self._remove([created])
            return False
        self._failing = False
        if self._stop.is_set():
            self._remove([created])
            return True
        staged = self.directory / f".{created}"
        staged.touch(mode=0o600)
        os.rename(staged, self.directory / "ready" / created)  # whole, or not there
        return True

    def _check_ready(self) -> None:
        """Replace idle containers that have ended (an agent started ahead that died
        while it waited would fail the run that claims it). The REPL's pool does
        without: its taker sees an ended container at the attach and starts its own."""
        import docker.errors
        import requests.exceptions

        for cid in self.ready():
            try:
                state = self.api.inspect_container(cid).get("State") or {}
            except docker.errors.NotFound:
                state = {}
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                continue
            if state.get("Running"):
                continue
            try:  # taken back first: never one a run just claimed
                os.rename(self.directory / "ready" / cid, self.directory / f".{cid}.ended")
            except OSError:
                continue
            log.info("warm pool: idle container %s had ended; replaced", cid[:12])
            self._remove([cid])
            (self.directory / f".{cid}.ended").unlink(missing_ok=True)

    def _check_taken(self) -> None:
        """Remove containers whose taker died before removing them."""
        import docker.errors
        import requests.exceptions

        host = socket.gethostname()
        for path in (self.directory / "taken").iterdir():
            cid, _, taker = path.name.partition("@")
            taker_host, _, pid = taker.rpartition(":")
            if taker_host == host and pid.isdigit() and pid_alive(int(pid)):
                try:
                    self.api.inspect_container(cid)
                    continue  # in use
                except docker.errors.NotFound:
                    pass  # removed by its run
                except (docker.errors.DockerException, requests.exceptions.RequestException):
                    continue
            else:
                self._remove([cid])
            path.unlink(missing_ok=True)
            if self._forget is not None:
                self._forget(cid)

    def _remove(self, ids: list[str]) -> None:
        import docker.errors
        import requests.exceptions

        for cid in ids:
            with contextlib.suppress(
                docker.errors.DockerException, requests.exceptions.RequestException
            ):
                self.api.remove_container(cid, force=True)
            if self._forget is not None:
                self._forget(cid)
