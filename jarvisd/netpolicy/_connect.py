"""Reaching an allowed target: resolve the name the proxy's own way, check every
address, connect to a checked address itself (never to the name again, so a DNS
answer that changes between check and connect cannot matter)."""

from __future__ import annotations

import asyncio
import socket

from ._addresses import IPAddress, parse_ip
from ._policy import NetDecision, NetPolicy, normalize_host

__all__ = ["ConnectFailed", "Refused", "Upstream", "open_upstream"]


class Refused(Exception):
    """The policy refuses every address the target has."""

    def __init__(self, reason: str, hint: str = "") -> None:
        super().__init__(reason)
        self.reason, self.hint = reason, hint


class ConnectFailed(Exception):
    """No address could be resolved or connected (an upstream failure: 502)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Upstream:
    """A connected upstream socket and the address it is connected to."""

    def __init__(self, sock: socket.socket, address: IPAddress) -> None:
        self.sock, self.address = sock, address


async def _addresses(policy: NetPolicy, host: str, port: int) -> list[tuple[IPAddress, bool]]:
    """(address, named) pairs for ``host``: a literal or the policy's hosts map are
    named by the user; anything else is what the system resolver says."""
    ip = parse_ip(host)
    if ip is not None:
        return [(ip, True)]
    mapped = policy.mapped(host)
    if mapped is not None:
        return [(mapped, True)]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
    except socket.gaierror as exc:
        raise ConnectFailed(f"cannot resolve {host}: {exc.strerror or exc}") from None
    found: list[tuple[IPAddress, bool]] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = parse_ip(str(sockaddr[0]))
        if address is not None and (address, False) not in found:
            found.append((address, False))
    if not found:
        raise ConnectFailed(f"{host} has no address")
    return found


async def open_upstream(
    policy: NetPolicy, decision: NetDecision, host: str, port: int, limit_s: float
) -> Upstream:
    """A socket connected to an address of ``host`` the policy admits. Raises
    Refused (the policy says no to all of them) or ConnectFailed."""
    name = normalize_host(host)
    try:
        async with asyncio.timeout(limit_s):
            candidates = await _addresses(policy, name, port)
            admitted: list[IPAddress] = []
            refusal: NetDecision | None = None
            for address, named in candidates:
                verdict = policy.admit_address(decision, address, named=named, host=name, port=port)
                if verdict.allowed:
                    admitted.append(address)
                elif refusal is None:
                    refusal = verdict
            if not admitted:
                assert refusal is not None
                raise Refused(refusal.reason, refusal.hint)
            errors: list[str] = []
            for address in admitted:
                try:
                    return Upstream(await _connect(address, port), address)
                except OSError as exc:
                    errors.append(f"{address}: {exc.strerror or exc}")
            raise ConnectFailed("cannot connect (" + "; ".join(errors[:4]) + ")")
    except TimeoutError:
        raise ConnectFailed(f"no connection within {limit_s:g} s") from None


async def _connect(address: IPAddress, port: int) -> socket.socket:
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.get_running_loop().sock_connect(sock, (address.compressed, port))
    except BaseException:
        sock.close()
        raise
    return sock
