"""What a CONNECT tunnel carries, read from its first bytes (:func:`tunnel_kind`), and
:class:`_End`, which ends a session (see ``_session``)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Final

from ._events import NetLimits
from ._http import Target
from ._policy import normalize_host
from ._tls import NEED_MORE, ClientHelloError, client_hello_sni

__all__ = ["_End", "first_of", "take_buffered", "tunnel_kind"]

_TOKEN_SP: Final = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}[ \t]")
_TOKEN_SO_FAR: Final = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]{0,32}\Z")
#: Control bytes (but tab and CR), which no request line holds.
_CONTROL: Final = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class _End(Exception):
    """Ends a session. ``refused``: ``reason`` refuses it in its event; otherwise
    an allowed connection ended for ``reason`` (idle, budget)."""

    def __init__(self, reason: str = "", *, refused: bool = True) -> None:
        super().__init__(reason)
        self.reason, self.refused = reason, refused


def tunnel_kind(data: bytes, target: Target, limits: NetLimits) -> str:
    """What the tunnel carries: "tls" (checked), "http", "opaque" or "more"."""
    # Leading blank lines and spaces: some servers skip them before a request line.
    start = data.lstrip(b" \t\r\n")
    if start[:1] == b"\x16":
        try:
            sni = client_hello_sni(start, limits.max_client_hello_bytes)
        except ClientHelloError as exc:
            raise _End(f"a TLS ClientHello the proxy cannot read ({exc})") from None
        if sni is NEED_MORE:
            return "more"
        assert sni is None or isinstance(sni, str)
        if sni is not None:
            try:
                same = normalize_host(sni) == normalize_host(target.host)
            except ValueError:
                same = False
            if not same:
                raise _End(
                    f"the TLS server name {sni[:100]!r} is not the CONNECT target "
                    f"{target} (domain fronting)"
                )
        return "tls"
    # HTTP/1.x: a request line, "METHOD SP target SP HTTP/x.y". A first line that
    # starts like one and names an HTTP version is read as HTTP (h11 then checks
    # it request by request, and refuses what it cannot parse). A first line that
    # ends without a version, or holds a control byte, which no HTTP server takes
    # in a request line (git's pkt-line has NULs), is another protocol (SSH's
    # banner, git://, Redis), relayed as bytes. Undecided bytes are bounded.
    line, newline, _ = start.partition(b"\n")
    if _TOKEN_SP.match(line):
        if b"HTTP/" in line.upper():
            return "http"
        if newline or _CONTROL.search(line):
            return "opaque"
    elif newline or not _TOKEN_SO_FAR.match(line):
        return "opaque"
    if len(data) > limits.max_head_bytes:
        raise _End(f"no whole first line within {limits.max_head_bytes} bytes")
    return "more"


async def first_of(
    read: Callable[[asyncio.StreamReader], Awaitable[bytes]],
    own: asyncio.StreamReader,
    reader: asyncio.StreamReader,
) -> tuple[bytes | None, bytes | None]:
    """The next bytes from the client, or from the upstream if it speaks first
    (both when both came): None for a side that sent nothing yet. ``read`` is the
    session's bounded read; ``own`` the client's reader, ``reader`` the upstream's."""
    client = asyncio.ensure_future(read(own))
    upstream = asyncio.ensure_future(read(reader))
    try:
        await asyncio.wait((client, upstream), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (client, upstream):
            if not task.done():
                task.cancel()
    # Both can end in one turn of the loop (their idle deadlines are the same): each
    # one's error is retrieved, or asyncio logs the one not raised here.
    errors = [t.exception() for t in (client, upstream) if t.done() and not t.cancelled()]
    for error in errors:
        if error is not None:
            raise error
    got = [t.result() if t.done() and not t.cancelled() else None for t in (client, upstream)]
    if got[1] == b"":
        raise _End("the upstream closed before the client spoke", refused=False)
    return got[0], got[1]


def take_buffered(reader: asyncio.StreamReader) -> bytes:
    """What ``reader`` holds past the last read. StreamReader has no public way to
    take it without waiting for more, so its buffer is read directly (CPython's
    ``_buffer``, a bytearray, present since 3.4)."""
    buffer: bytearray = reader._buffer  # type: ignore[attr-defined]
    data = bytes(buffer)
    buffer.clear()
    return data
