"""Keeping tests off the network: only loopback and Unix sockets may be reached."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _socket import _Address
    from _socket import socket as _RawSocket

__all__ = ["NetworkRefused", "refuse_network"]

_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class NetworkRefused(RuntimeError):
    """A test tried to reach the network. Deliberately not an ``OSError``: code under
    test must not mistake it for a server that is merely down."""


def _is_local(host: object) -> bool:
    if host is None:
        return True  # getaddrinfo(None, port): the local wildcard or loopback
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    host = str(host).strip("[]").split("%", 1)[0]
    if host == "" or host.lower() in _LOCAL_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # a name to resolve: that is a DNS query already
    return address.is_loopback or address.is_unspecified


def _check(family: int, address: object) -> None:
    if family == getattr(socket, "AF_UNIX", object()):
        return
    host = address[0] if isinstance(address, tuple) and address else address
    if not _is_local(host):
        raise NetworkRefused(f"tests may not reach {address!r}: only loopback is allowed")


@contextlib.contextmanager
def refuse_network() -> Iterator[None]:
    """Within the block (all threads), connecting or resolving anything but loopback
    raises :class:`NetworkRefused`; servers on 127.0.0.1 and Unix sockets work as usual.
    Child processes are not covered: give them no route instead (``PIP_NO_INDEX``...)."""
    cls = socket.socket
    saved = (cls.connect, cls.connect_ex, socket.getaddrinfo)
    real_connect, real_connect_ex, real_getaddrinfo = saved
    if getattr(real_connect, "_refuses_network", False):  # nested: already in force
        yield
        return

    def connect(self: _RawSocket, address: _Address) -> None:
        _check(self.family, address)
        real_connect(self, address)

    def connect_ex(self: _RawSocket, address: _Address) -> int:
        _check(self.family, address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: bytes | str | None, *args: Any, **kwargs: Any) -> Any:
        if not _is_local(host):
            raise NetworkRefused(f"tests may not resolve {host!r}: only loopback is allowed")
        return real_getaddrinfo(host, *args, **kwargs)

    connect._refuses_network = True  # type: ignore[attr-defined]
    cls.connect = connect  # type: ignore[method-assign]
    cls.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo
    try:
        yield
    finally:
        cls.connect, cls.connect_ex, socket.getaddrinfo = saved  # type: ignore[method-assign]
