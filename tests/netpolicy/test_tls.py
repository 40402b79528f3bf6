"""The ClientHello parser: real hellos from Python's TLS stack, split anywhere, and
malformed or oversized ones refused within the bound."""

from __future__ import annotations

import ssl

import pytest

from jarvisd.netpolicy._tls import NEED_MORE, ClientHelloError, client_hello_sni

LIMIT = 16 * 1024


def hello(server_hostname: str | None) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = server_hostname is not None
    if server_hostname is None:
        context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_a_real_client_hello_names_its_server() -> None:
    data = hello("files.pythonhosted.org")
    assert client_hello_sni(data, LIMIT) == "files.pythonhosted.org"
    assert client_hello_sni(hello(None), LIMIT) is None


def test_a_hello_split_anywhere_needs_more_until_whole() -> None:
    data = hello("upstream.test")
    for cut in (0, 1, 4, 5, 6, 40, len(data) - 1):
        assert client_hello_sni(data[:cut], LIMIT) is NEED_MORE, cut
    # the same message carried in several small records
    body = data[5:]
    records = b"".join(
        b"\x16\x03\x01" + len(body[i : i + 50]).to_bytes(2, "big") + body[i : i + 50]
        for i in range(0, len(body), 50)
    )
    assert client_hello_sni(records, LIMIT) == "upstream.test"


@pytest.mark.parametrize(
    "data",
    [
        b"\x17\x03\x03\x00\x10" + b"\x00" * 16,  # application data, not a handshake
        b"\x16\x02\x00\x00\x10" + b"\x00" * 16,  # not TLS 1.x
        b"\x16\x03\x01\x00\x00",  # an empty record
        b"\x16\x03\x01\x00\x08\x02\x00\x00\x04\x00\x00\x00\x00",  # a ServerHello
        b"\x16\x03\x01\x00\x08\x01\x00\x00\x04\x03\x03\x00\x00",  # fields past the end
    ],
)
def test_malformed_hellos_are_refused(data: bytes) -> None:
    with pytest.raises(ClientHelloError):
        client_hello_sni(data, LIMIT)


def test_a_hello_larger_than_the_bound_is_refused_before_it_is_read() -> None:
    data = hello("upstream.test")
    with pytest.raises(ClientHelloError, match="larger than 100 bytes"):
        client_hello_sni(data, 100)
    # a declared length past the bound: refused without waiting for the bytes
    huge = b"\x16\x03\x01\x40\x00\x01\xff\xff\xff"
    with pytest.raises(ClientHelloError):
        client_hello_sni(huge, LIMIT)


def _with_names(*names: bytes) -> bytes:
    entries = b"".join(b"\x00" + len(n).to_bytes(2, "big") + n for n in names)
    ext = len(entries).to_bytes(2, "big") + entries
    extensions = b"\x00\x00" + len(ext).to_bytes(2, "big") + ext
    body = (b"\x03\x03" + b"\x00" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
            + len(extensions).to_bytes(2, "big") + extensions)  # fmt: skip
    message = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + len(message).to_bytes(2, "big") + message


def test_two_server_names_are_refused() -> None:
    assert client_hello_sni(_with_names(b"a.example"), LIMIT) == "a.example"
    with pytest.raises(ClientHelloError, match="two hosts"):
        client_hello_sni(_with_names(b"a.example", b"b.example"), LIMIT)
    with pytest.raises(ClientHelloError, match="ASCII"):
        client_hello_sni(_with_names("é.example".encode()), LIMIT)
