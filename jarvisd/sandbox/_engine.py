"""The container engine: where it listens, a connected client, what a stall says, its
errors as SandboxError, and the sweep of containers whose owner is gone."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._config import Config
from .._errors import SandboxError, SandboxUnavailable
from ._policy import (
    LABEL,
    OWNER_LABEL,
)
from ._reaper import remove_later
from ._remote import transport
from ._staging import pid_alive

__all__ = ["Engine", "connect", "engine_address", "engine_named", "sweep_orphans"]


def engine_address(config: Config, flavor: str = "docker") -> str:
    """Where the container engine listens ("" = the SDK's default for docker)."""
    if config.sandbox.docker_host:
        return config.sandbox.docker_host
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    if flavor == "podman":
        if os.environ.get("CONTAINER_HOST"):
            return os.environ["CONTAINER_HOST"]
        if os.getuid() == 0:
            return "unix:///run/podman/podman.sock"
        runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
        return f"unix://{runtime}/podman/podman.sock"
    return ""


def engine_named(config: Config, flavor: str = "docker") -> str:
    """Where the engine is, and which setting says so, for messages."""
    address = engine_address(config, flavor)
    if config.sandbox.docker_host:
        return f"sandbox.docker_host={address}"
    if address and os.environ.get("DOCKER_HOST") == address:
        return f"DOCKER_HOST={address}"
    return address or "the default Docker socket"


@dataclass(frozen=True, slots=True)
class Engine:
    """The engine a channel's container runs on, for telling and handling a stall."""

    address: str
    named: str
    timeout: float
    connect: Callable[[], Any]

    def stalled(self, doing: str = "") -> SandboxUnavailable:
        what = f" while trying to {doing}" if doing else ""
        return SandboxUnavailable(
            f"the container engine stopped answering ({self.named}): no reply within "
            f"{self.timeout:g} s (sandbox.engine_timeout){what}; the run's containers are "
            "removed when it answers again"
        )

    def remove_later(self, ref: str) -> None:
        remove_later(self.address, self.connect, ref)


def _no_answer(exc: BaseException) -> bool:
    """Whether ``exc`` says the engine did not answer (rather than answered no)."""
    import requests.exceptions

    return isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout)


def connect(config: Config, flavor: str = "docker", timeout: float = 60.0) -> Any:
    """A connected ``docker.DockerClient``, or SandboxUnavailable saying what to do."""
    import docker
    import docker.errors
    import requests.exceptions

    address = engine_address(config, flavor)
    where = address or "the default Docker socket"
    socket_path = (address or "unix:///var/run/docker.sock").removeprefix("unix://")
    if "://" not in socket_path and not os.path.exists(socket_path):
        # Checked first: the SDK leaks the socket of a failed unix connection.
        raise SandboxUnavailable(
            f"no container engine at {where}: {socket_path} does not exist; start one (for "
            "development: packaging/dev/docker-up.sh, then export the DOCKER_HOST it prints) "
            'or set sandbox.backend = "bwrap"'
        )
    how = transport(config, address)  # refuses an engine it must not talk to
    client = None
    try:
        # Negotiate the API version ourselves (what version="auto" does) so a failed
        # attempt can close its connection instead of leaking it.
        client = docker.DockerClient(**how.client_kwargs(), version="1.41", timeout=timeout)
        if how.tls_dir is not None:
            # Otherwise requests lets REQUESTS_CA_BUNDLE (set system-wide on many
            # machines) replace the engine's CA, and the engine's certificate fails.
            client.api.trust_env = False
        client.api._version = str(client.api.version(api_version=False)["ApiVersion"])
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        if client is not None:
            client.close()
        raise SandboxUnavailable(
            f"no container engine answers at {where} ({exc}); start one (for development: "
            "packaging/dev/docker-up.sh, then export the DOCKER_HOST it prints) or set "
            'sandbox.backend = "bwrap"'
        ) from exc
    return client


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def sweep_orphans(
    config: Config | None = None, *, everything: bool = False, client: Any = None
) -> list[str]:
    """Remove labelled containers, then volumes, whose owning process is gone
    (``everything``: all labelled ones). Returns the removed container ids and volume
    names. The daemon calls this at start."""
    import docker.errors
    import requests.exceptions

    own_client = client is None
    if client is None:
        from .._config import load_config

        config = config or load_config()
        # The engine of the configured backend: a podman socket is not DOCKER_HOST's.
        flavor = "podman" if config.sandbox.backend == "podman" else "docker"
        client = connect(config, flavor, timeout=config.sandbox.engine_timeout)
    host = socket.gethostname()
    removed = []
    try:
        try:
            found = client.api.containers(all=True, filters={"label": f"{LABEL}=1"})
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise SandboxUnavailable(f"cannot list sandbox containers: {exc}") from exc
        for info in found:
            owner = (info.get("Labels") or {}).get(OWNER_LABEL, "")
            if not everything and _owner_alive(owner, host):
                continue
            with contextlib.suppress(
                docker.errors.DockerException, requests.exceptions.RequestException
            ):
                client.api.remove_container(info["Id"], force=True)
                removed.append(info["Id"])
        # The volumes that carried runs' files to an engine elsewhere (``_transfer``):
        # after the containers, which hold them while they exist.
        with contextlib.suppress(
            docker.errors.DockerException, requests.exceptions.RequestException
        ):
            listed = client.api.volumes(filters={"label": f"{LABEL}=1"}) or {}
            for volume in listed.get("Volumes") or ():
                owner = (volume.get("Labels") or {}).get(OWNER_LABEL, "")
                if not everything and _owner_alive(owner, host):
                    continue
                with contextlib.suppress(docker.errors.DockerException):
                    client.api.remove_volume(volume["Name"], force=True)
                    removed.append(volume["Name"])
    finally:
        if own_client:
            client.close()
    return removed


def _owner_alive(owner: str, host: str) -> bool:
    owner_host, _, pid_text = owner.rpartition(":")
    return owner_host == host and pid_text.isdigit() and pid_alive(int(pid_text))


def _translate(exc: Exception, doing: str) -> SandboxError:
    import docker.errors
    import requests.exceptions

    if isinstance(exc, requests.exceptions.ConnectionError):
        return SandboxUnavailable(f"cannot {doing}: the container engine stopped answering")
    if isinstance(exc, docker.errors.APIError):
        return SandboxError(f"cannot {doing}: {exc.explanation or exc}")
    return SandboxError(f"cannot {doing}: {exc}")
