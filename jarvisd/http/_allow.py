"""Which ``Host`` and ``Origin`` headers the model server answers, as Ollama does.

A browser lets any web page send requests to ``127.0.0.1:11434``; two guards keep
those pages from using the model:

* **Host** (DNS rebinding: a page's own name re-resolved to 127.0.0.1, so the browser
  sends ``Host: evil.example``): only loopback names and addresses, or the address the
  server is bound to, each with or without a port. Bound to a wildcard address (the
  user exposed the server on purpose) any IP literal and this machine's name pass too,
  never another name.
* **Origin** (a page posting across origins): when a request carries one, it must be
  an http(s) origin on a loopback host, any port, or match one of the extra origins
  the user allowed (``fnmatch`` patterns such as ``chrome-extension://*``).
  Requests without an Origin (every non-browser client) pass.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Allowlist"]

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def _split_host(value: str) -> str:
    """The host part of a Host header (``[::1]:8080`` -> ``::1``), lowercase, without a
    trailing dot; "" when it cannot be parsed."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return ""
        host, rest = value[1:end], value[end + 1 :]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return ""
        return host
    if value.count(":") == 1:
        value, port = value.split(":")
        if not port.isdigit():
            return ""
    return value.rstrip(".")


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    address = _ip(host)
    return address is not None and address.is_loopback


@dataclass(frozen=True, slots=True)
class Allowlist:
    """What a server bound to ``bound`` accepts; ``origins``: extra allowed origins."""

    bound: str
    origins: tuple[str, ...] = ()

    @classmethod
    def for_server(cls, bound: str, origins: Iterable[str] = ()) -> Allowlist:
        return cls(_split_host(bound) or bound.lower(),
                   tuple(o.strip().lower().rstrip("/") for o in origins if o.strip()))  # fmt: skip

    def host_refusal(self, header: str | None) -> str | None:
        """Why a request with this Host header is refused (None: it is allowed)."""
        if header is None:
            return None  # HTTP/1.0 clients; every browser sends one
        host = _split_host(header)
        if host and (_is_loopback(host) or host == self.bound):
            return None
        bound_ip = _ip(self.bound)
        wildcard = bound_ip is not None and bound_ip.is_unspecified
        if host and wildcard and (_ip(host) is not None or host == socket.gethostname().lower()):
            return None
        return f"host {header!r} is not allowed (DNS rebinding guard)"

    def origin_refusal(self, header: str | None) -> str | None:
        """Why a request with this Origin header is refused (None: it is allowed)."""
        if header is None:
            return None
        origin = header.strip().lower().rstrip("/")
        if any(fnmatch.fnmatchcase(origin, pattern) for pattern in self.origins):
            return None
        refusal = f"origin {header!r} is not allowed (pass --allow-origin to allow it)"
        try:
            parts = urlsplit(origin)
            host = parts.hostname or ""
            parts.port  # noqa: B018 - raises ValueError on a malformed port
        except ValueError:
            return refusal
        if parts.scheme not in ("http", "https") or not host or not _is_loopback(host):
            return refusal
        if parts.path or parts.query or parts.fragment or parts.username is not None:
            return refusal  # an origin is scheme://host[:port], nothing more
        return None
