"""How jarvis reaches an engine that is not a local socket, and what it refuses.

A Docker Engine API endpoint runs containers as root on its machine: whoever can talk
to it owns that machine. So:

* ``unix://`` (and the default socket): the socket's own permissions guard it.
* ``ssh://USER@HOST``: ssh authenticates; the SDK runs the ``ssh`` program, so keys and
  known hosts are the user's own.
* ``tcp://HOST:PORT``: TLS with client certificates (``sandbox.docker_tls``, or Docker's
  own ``DOCKER_TLS_VERIFY`` + ``DOCKER_CERT_PATH``), the engine's certificate checked
  against the given CA. Without certificates, only a loopback address is accepted (it
  is as reachable as a local socket to this machine's users, no more): any other host
  is refused before a byte is sent.

``is_remote`` tells the rest of the sandbox whether host paths mean anything to the
engine: a remote engine cannot bind-mount this machine's files, so they travel to it as
archives (``_transfer``; also for an engine marked so with ``sandbox.docker_remote``).
"""

from __future__ import annotations

import importlib
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from .._config import Config
from .._errors import SandboxUnavailable

__all__ = ["TLS_FILES", "Transport", "is_remote", "transport"]

#: What a TLS directory holds, as the Docker CLI names them.
TLS_FILES = ("ca.pem", "cert.pem", "key.pem")
_TCP_SCHEMES = ("tcp", "http", "https")


@dataclass(frozen=True, slots=True)
class Transport:
    """What ``docker.DockerClient`` needs besides the address."""

    base_url: str | None
    tls_dir: Path | None = None
    use_ssh_client: bool = False

    def client_kwargs(self) -> dict[str, object]:
        kwargs: dict[str, object] = {"base_url": self.base_url}
        if self.tls_dir is not None:
            from docker.tls import TLSConfig

            ca, cert, key = (str(self.tls_dir / name) for name in TLS_FILES)
            kwargs["tls"] = TLSConfig(client_cert=(cert, key), ca_cert=ca, verify=True)
        if self.use_ssh_client:
            kwargs["use_ssh_client"] = True
        return kwargs


def _scheme(address: str) -> str:
    """``tcp``, ``ssh``, ...; a bare path (or "", the default socket) is ``unix``."""
    return address.partition("://")[0] if "://" in address else "unix"


def _host_of(address: str) -> str:
    try:
        return urlsplit(address).hostname or ""
    except ValueError:
        return ""


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _tls_dir(config: Config) -> Path | None:
    if config.sandbox.docker_tls:
        return Path(config.sandbox.docker_tls).expanduser()
    if os.environ.get("DOCKER_TLS_VERIFY"):
        return Path(os.environ.get("DOCKER_CERT_PATH") or "~/.docker").expanduser()
    return None


def is_remote(address: str) -> bool:
    """Whether the engine at ``address`` may be on another machine (its host paths are
    not ours)."""
    scheme = _scheme(address)
    if scheme == "ssh":
        return True
    if scheme in _TCP_SCHEMES:
        return not _loopback(_host_of(address))
    return False


def transport(config: Config, address: str) -> Transport:
    """How to reach the engine at ``address``; SandboxUnavailable for an engine jarvis will
    not talk to (an unauthenticated tcp:// beyond loopback, missing certificates)."""
    scheme = _scheme(address)
    if scheme == "ssh":
        _need_paramiko(address)
        return Transport(address, use_ssh_client=True)
    if scheme not in _TCP_SCHEMES:
        return Transport(address or None)
    host = _host_of(address)
    if not host:
        raise SandboxUnavailable(f"container engine address {address!r}: no host in it")
    tls = _tls_dir(config)
    if tls is None:
        if _loopback(host):
            return Transport(address)
        raise SandboxUnavailable(
            f"refused the container engine at {address}: a tcp:// engine without TLS "
            "client certificates lets anyone who reaches it run containers as root on its "
            "machine. Give sandbox.docker_tls = DIR (with ca.pem, cert.pem, key.pem; or "
            "DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH), or use ssh://USER@HOST"
        )
    missing = [name for name in TLS_FILES if not (tls / name).is_file()]
    if missing:
        raise SandboxUnavailable(
            f"the TLS directory {tls} for the container engine at {address} lacks "
            f"{', '.join(missing)} (it needs {', '.join(TLS_FILES)})"
        )
    return Transport(address, tls_dir=tls)


def _need_paramiko(address: str) -> None:
    # The docker SDK imports paramiko for any ssh:// engine, though the ssh program
    # carries the connection here; without it the SDK's own message reads as if no
    # engine answered.
    try:
        importlib.import_module("paramiko")
    except ImportError as exc:
        raise SandboxUnavailable(
            f"the container engine at {address} is reached over ssh, which needs the "
            "paramiko package: pip install 'jarvisd[ssh]'"
        ) from exc
