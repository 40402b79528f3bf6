"""What the egress proxy reports (one event per connection) and what bounds it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["NetEvent", "NetLimits"]


@dataclass(frozen=True)
class NetEvent:
    """One client connection to the proxy, allowed or refused, reported when it ends.

    ``address`` is the IP actually connected to (None when refused before that);
    ``method`` is ``CONNECT``, the plain-HTTP method, or ``""`` when the client sent
    no readable request. Bytes count what crossed the proxy each way after the
    request head: ``bytes_up`` from the sandbox, ``bytes_down`` to it.
    """

    host: str
    port: int
    address: str | None
    allowed: bool
    reason: str
    method: str
    bytes_up: int
    bytes_down: int
    duration: float
    #: Wall-clock time (epoch seconds) the connection was accepted.
    started: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NetLimits:
    """Bounds of one proxy (one run). Every buffer and every wait is bounded."""

    #: Client connections open at once; one more is refused (503).
    max_connections: int = 32
    #: Bytes relayed both ways over the proxy's lifetime; past it connections close
    #: and new ones are refused.
    max_total_bytes: int = 8 * 1024**3
    #: Seconds without a byte either way before a connection is closed.
    idle_timeout: float = 60.0
    #: Seconds to resolve a name and connect upstream (all addresses together).
    connect_timeout: float = 10.0
    #: Seconds for a whole request head (and for a tunnel's first message), however
    #: slowly it comes: a trickle of bytes would otherwise hold a connection forever.
    head_timeout: float = 30.0
    #: Bytes of one request head (request line and headers).
    max_head_bytes: int = 16 * 1024
    #: Bytes read to find a TLS ClientHello's server name inside a tunnel.
    max_client_hello_bytes: int = 16 * 1024
    #: Events kept in :attr:`EgressProxy.events` (the newest).
    max_events: int = 1000
    #: Bytes read from one side before writing them to the other.
    chunk_bytes: int = 256 * 1024

    def __post_init__(self) -> None:
        for name in (
            "max_connections",
            "max_total_bytes",
            "max_head_bytes",
            "max_client_hello_bytes",
            "max_events",
            "chunk_bytes",
        ):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"NetLimits.{name} must be positive")
        for name in ("idle_timeout", "connect_timeout", "head_timeout"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"NetLimits.{name} must be positive")
