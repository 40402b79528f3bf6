"""HTTP pieces of the egress proxy: request targets, hop-by-hop headers, and the
refusal a sandboxed program reads (a status, a body and a header that name the host
and the setting that would allow it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from ._addresses import parse_ip
from ._policy import format_target

__all__ = [
    "BadTarget",
    "Refusal",
    "Target",
    "authority",
    "forward_headers",
    "printable",
    "refusal_bytes",
    "url_target",
]

#: Headers that describe one hop, never forwarded (RFC 9110 7.6.1), and the proxy's own.
#: Transfer-Encoding stays: h11 frames the forwarded body by it (and re-chunks it).
HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
    }
)
_UNSAFE: Final = re.compile(r"[^\x20-\x7e]")
_MAX_HEADER_TEXT: Final = 400


class BadTarget(ValueError):
    """A request target the proxy cannot serve."""


@dataclass(frozen=True)
class Target:
    host: str  # as the client wrote it, without brackets
    port: int

    def __str__(self) -> str:
        return format_target(self.host, self.port)


def authority(text: str, default_port: int | None) -> Target:
    """``host[:port]`` (IPv6 in brackets) as a Target; raises BadTarget."""
    if not text or len(text) > 300:
        raise BadTarget("an empty or overlong host")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise BadTarget("an IPv6 address without ']'")
        host, rest = text[1:end], text[end + 1 :]
        if parse_ip(host) is None:
            raise BadTarget("not an IPv6 address in brackets")
    else:
        host, _, port_text = text.partition(":")
        rest = ":" + port_text if _ else ""
    if rest:
        if not rest.startswith(":") or not rest[1:].isdigit() or len(rest) > 6:
            raise BadTarget("a port that is not a number")
        port = int(rest[1:])
    elif default_port is None:
        raise BadTarget("no port")
    else:
        port = default_port
    if not host or not 0 < port < 65536:
        raise BadTarget("no host, or a port out of range")
    return Target(host, port)


def url_target(url: str) -> tuple[Target, str]:
    """An absolute-form ``http://host[:port]/path?query`` as (target, origin-form)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "http":
        if sep and scheme.lower() == "https":
            raise BadTarget("an https:// URL sent as plain HTTP: use CONNECT")
        raise BadTarget("not an absolute http:// URL (the proxy needs one, or CONNECT)")
    cut = min(
        (i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest)
    )
    auth, path = rest[:cut], rest[cut:]
    if "@" in auth:
        raise BadTarget("credentials in the URL's host part")
    path = path.split("#", 1)[0]
    if not path.startswith("/"):
        path = "/" + path
    return authority(auth, 80), path


def forward_headers(
    headers: list[tuple[bytes, bytes]], host: bytes | None
) -> list[tuple[bytes, bytes]]:
    """``headers`` without hop-by-hop ones (also those ``Connection`` names); with
    ``host``, the Host header replaced by it (first)."""
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    chunked = any(name.lower() == b"transfer-encoding" for name, _ in headers)
    kept = [
        (name, value)
        for name, value in headers
        if (low := name.lower()) not in HOP_BY_HOP
        and low not in named
        and (host is None or low != b"host")
        # With Transfer-Encoding a Content-Length is dropped (RFC 9112 6.3): an
        # upstream's answer is relayed with one framing only.
        and not (chunked and low == b"content-length")
    ]
    if host is not None:
        kept.insert(0, (b"host", host))
    return kept


def printable(text: str, limit: int) -> str:
    """``text`` with anything but printable ASCII replaced by "?", at most ``limit``
    characters: what a sandboxed client wrote, made safe for a header or a terminal."""
    return _UNSAFE.sub("?", text[: limit * 2])[:limit]


def _clean(text: str, limit: int = _MAX_HEADER_TEXT) -> str:
    return printable(text, limit)


@dataclass(frozen=True)
class Refusal:
    """Why a request is not served, as the sandboxed program will read it."""

    status: int
    target: str  # host:port, or "" when the request was not readable
    reason: str
    #: The allow entry that would let it through, when one would.
    hint: str = ""

    def message(self) -> str:
        what = (
            f"jarvis refused the connection to {self.target}"
            if self.target
            else ("jarvis refused the request")
        )
        text = f"{what}: {self.reason}."
        if self.hint:
            text += (
                f" To allow it: --allow-net {self.hint}, or "
                f'[sandbox.network] allow = ["{self.hint}"] in the config.'
            )
        return text


_PHRASES: Final = {
    400: "Bad Request",
    403: "Forbidden",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def refusal_bytes(refusal: Refusal) -> bytes:
    """A whole HTTP/1.1 response that closes the connection."""
    body = (_clean(refusal.message(), 2000) + "\n").encode()
    header = _clean(f"{refusal.target}: {refusal.reason}" if refusal.target else refusal.reason)
    head = (
        f"HTTP/1.1 {refusal.status} {_PHRASES.get(refusal.status, 'Error')}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"X-Jarvis-Refused: {header}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body
