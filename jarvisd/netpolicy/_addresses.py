"""Which IP addresses the egress proxy may connect to, and why not.

A sandboxed program must not reach the host's own services, the LAN, or a cloud's
metadata service through the proxy. Every address the proxy is about to connect to
(after its own resolution, so DNS rebinding cannot swap it) is classified here. IPv6
forms that embed an IPv4 address (mapped, compatible, 6to4, NAT64) are classified by
the address they embed: ``::ffff:127.0.0.1`` is loopback.

The classes, by how much an allow entry can unlock them:

- ``public``: any matching entry;
- ``private``, ``shared`` (CGNAT 100.64/10), ``reserved``: an exact (non-wildcard)
  entry, also by a name that resolves to one (a LAN mirror);
- ``loopback``, ``link-local``: an exact entry that names the address
  literally, or a name the policy's ``hosts`` maps to it: never through DNS, where
  a rebinding answer would reach the host's own services;
- ``metadata``, ``unspecified``, ``multicast``, ``broadcast``: never.
"""

from __future__ import annotations

import ipaddress
from typing import Final

__all__ = [
    "LAN",
    "LOCAL",
    "NEVER",
    "PUBLIC",
    "IPAddress",
    "classify",
    "parse_ip",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

PUBLIC: Final = "public"
#: Never connected to, whatever the policy says.
NEVER: Final = frozenset({"metadata", "unspecified", "multicast", "broadcast"})
#: Only by literal address or the policy's own ``hosts`` map: a DNS answer that
#: rebinds a name there would reach the host's own services.
LOCAL: Final = frozenset({"loopback", "link-local"})
#: Also by an exact entry whose name resolves there. Reserved ranges (documentation,
#: benchmarking, future use) reach no host service, and some networks serve their
#: package index from one (pypi.org resolves to 203.0.113.80 on jarvis's CI machines).
LAN: Final = frozenset({"private", "shared", "reserved"})

_METADATA: Final = frozenset(
    {
        ipaddress.IPv4Address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack...
        ipaddress.IPv4Address("169.254.170.2"),  # AWS ECS task credentials
        ipaddress.IPv4Address("100.100.100.200"),  # Alibaba Cloud
        ipaddress.IPv6Address("fd00:ec2::254"),  # AWS over IPv6
    }
)
_SHARED: Final = ipaddress.IPv4Network("100.64.0.0/10")
_BROADCAST: Final = ipaddress.IPv4Address("255.255.255.255")
_THIS_NETWORK: Final = ipaddress.IPv4Network("0.0.0.0/8")
_IPV4_COMPATIBLE: Final = ipaddress.IPv6Network("::/96")
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL: Final = ipaddress.IPv6Network("64:ff9b:1::/48")
_ULA: Final = ipaddress.IPv6Network("fc00::/7")
_SITE_LOCAL: Final = ipaddress.IPv6Network("fec0::/10")


def parse_ip(text: str) -> IPAddress | None:
    """``text`` as an IP address (IPv6 with or without brackets), or None."""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if "%" in text:  # a scoped IPv6 address names an interface: never a destination
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form carries to, if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or ip in _IPV4_COMPATIBLE:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def classify(ip: IPAddress) -> str:
    """``"public"``, or the class that keeps ``ip`` from being connected to freely."""
    if ip in _METADATA:
        return "metadata"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.is_unspecified:
            return "unspecified"
        if ip.is_loopback:
            return "loopback"
        inner = _embedded_v4(ip)
        if inner is not None:
            # The embedded address decides (a NAT64 or 6to4 form of a public address
            # reaches that address); the deprecated IPv4-compatible form is never
            # a real destination.
            embedded = classify(inner)
            if embedded == PUBLIC and ip in _IPV4_COMPATIBLE:
                return "reserved"
            return embedded
        if ip.is_multicast:
            return "multicast"
        if ip.is_link_local:
            return "link-local"
        if ip in _SITE_LOCAL:
            return "private"  # deprecated site-local: a LAN by another name
        if ip in _ULA or ip in _NAT64_LOCAL:
            return "private"
        if not ip.is_global:
            return "reserved"
        return PUBLIC
    if ip in _THIS_NETWORK:
        return "unspecified"
    if ip == _BROADCAST:
        return "broadcast"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip in _SHARED:
        return "shared"
    if ip.is_private:
        # RFC 1918 and the IETF's special blocks together: the RFC 1918 ones are the
        # LAN, the rest (documentation, benchmarking, protocol assignments) reserved.
        if any(ip in net for net in _RFC1918):
            return "private"
        return "reserved"
    if ip.is_reserved or not ip.is_global:
        return "reserved"
    return PUBLIC


_RFC1918: Final = (
    ipaddress.IPv4Network("10.0.0.0/8"),
    ipaddress.IPv4Network("172.16.0.0/12"),
    ipaddress.IPv4Network("192.168.0.0/16"),
)
