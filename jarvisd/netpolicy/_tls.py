"""The server name a TLS ClientHello asks for (SNI), parsed from the first bytes a
client sends through a CONNECT tunnel, within a byte bound.

The proxy compares it with the CONNECT target: a ClientHello for ``denied.example``
sent through a tunnel to ``allowed.example`` is domain fronting on a shared front
(a CDN serves both). The handshake message may span several TLS records; every
length is checked against the bytes present before it is used.
"""

from __future__ import annotations

from typing import Final

__all__ = ["NEED_MORE", "ClientHelloError", "client_hello_sni"]

#: Returned while the ClientHello is not complete yet.
NEED_MORE: Final = object()
_HANDSHAKE: Final = 0x16
_CLIENT_HELLO: Final = 0x01
_SERVER_NAME: Final = 0x0000
_MAX_RECORD: Final = 2**14 + 2048


class ClientHelloError(ValueError):
    """Not a well-formed TLS ClientHello."""


def client_hello_sni(data: bytes, max_bytes: int) -> str | object | None:
    """The host name in the ClientHello that ``data`` starts with, None when it names
    none, or :data:`NEED_MORE`. Raises :class:`ClientHelloError` when ``data`` is not
    one, or when it does not end within ``max_bytes``."""
    message = bytearray()
    pos = 0
    while True:
        if len(message) >= 4:
            need = 4 + int.from_bytes(message[1:4], "big")
            if message[0] != _CLIENT_HELLO:
                raise ClientHelloError("the first handshake message is not a ClientHello")
            if need > max_bytes:
                raise ClientHelloError(f"a ClientHello larger than {max_bytes} bytes")
            if len(message) >= need:
                return _sni(bytes(message[4:need]))
        if pos >= max_bytes:
            raise ClientHelloError(f"no ClientHello within {max_bytes} bytes")
        if len(data) < pos + 5:
            return NEED_MORE
        kind, major, length = (
            data[pos],
            data[pos + 1],
            int.from_bytes(data[pos + 3 : pos + 5], "big"),
        )
        if kind != _HANDSHAKE or major != 3 or not 0 < length <= _MAX_RECORD:
            raise ClientHelloError("not a TLS handshake record")
        if len(data) < pos + 5 + length:
            if pos + 5 + length > max_bytes:
                raise ClientHelloError(f"no ClientHello within {max_bytes} bytes")
            return NEED_MORE
        message += data[pos + 5 : pos + 5 + length]
        pos += 5 + length


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ClientHelloError("a ClientHello field runs past its end")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def number(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, n: int) -> _Reader:
        return _Reader(self.take(self.number(n)))

    def at_end(self) -> bool:
        return self.pos >= len(self.data)


def _sni(body: bytes) -> str | None:
    hello = _Reader(body)
    hello.take(2 + 32)  # legacy_version, random
    hello.vector(1)  # session id
    hello.vector(2)  # cipher suites
    hello.vector(1)  # compression methods
    if hello.at_end():
        return None  # no extensions at all
    extensions = hello.vector(2)
    if not hello.at_end():
        raise ClientHelloError("bytes after a ClientHello's extensions")
    found: str | None = None
    seen: set[int] = set()
    while not extensions.at_end():
        kind = extensions.number(2)
        data = extensions.vector(2)
        if kind in seen:
            raise ClientHelloError("a ClientHello repeats an extension")
        seen.add(kind)
        if kind != _SERVER_NAME:
            continue
        names = data.vector(2)
        if not data.at_end():
            raise ClientHelloError("bytes after the server_name list")
        while not names.at_end():
            name_type = names.number(1)
            name = names.vector(2).data
            if name_type != 0:
                continue  # not a host_name: no other type is defined
            if found is not None:
                raise ClientHelloError("a ClientHello names two hosts")
            try:
                found = name.decode("ascii")
            except UnicodeDecodeError:
                raise ClientHelloError("a server name that is not ASCII") from None
    return found
