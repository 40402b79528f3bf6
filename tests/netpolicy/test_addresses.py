"""The address classifier, for IPv4 and IPv6, including the IPv6 forms that carry an
IPv4 address (mapped, compatible, 6to4, NAT64)."""

from __future__ import annotations

import pytest

from jarvisd.netpolicy import classify
from jarvisd.netpolicy._addresses import parse_ip

TABLE = [
    ("8.8.8.8", "public"),
    ("1.1.1.1", "public"),
    ("2606:4700:4700::1111", "public"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("::1", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("fec0::1", "private"),
    ("64:ff9b:1::1", "private"),
    ("100.64.0.1", "shared"),
    ("100.127.255.255", "shared"),
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("169.254.169.254", "metadata"),
    ("169.254.170.2", "metadata"),
    ("100.100.100.200", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("::", "unspecified"),
    ("255.255.255.255", "broadcast"),
    ("192.0.2.1", "reserved"),
    ("198.18.0.1", "reserved"),
    ("240.0.0.1", "reserved"),
    ("2001:db8::1", "reserved"),
    # IPv6 forms of IPv4 addresses: the IPv4 address decides
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:7f00:1", "loopback"),
    ("::ffff:10.0.0.1", "private"),
    ("::ffff:169.254.169.254", "metadata"),
    ("::ffff:8.8.8.8", "public"),
    ("::127.0.0.1", "loopback"),  # IPv4-compatible (deprecated)
    ("::8.8.8.8", "reserved"),
    ("2002:7f00:1::", "loopback"),  # 6to4
    ("2002:a9fe:a9fe::1", "metadata"),
    ("2002:808:808::", "public"),
    ("64:ff9b::7f00:1", "loopback"),  # NAT64
    ("64:ff9b::a9fe:a9fe", "metadata"),
    ("64:ff9b::808:808", "public"),
]


@pytest.mark.parametrize(("text", "kind"), TABLE)
def test_classify(text: str, kind: str) -> None:
    ip = parse_ip(text)
    assert ip is not None
    assert classify(ip) == kind


@pytest.mark.parametrize("text", ["[::1]", "::1"])
def test_parse_ip_takes_brackets(text: str) -> None:
    assert parse_ip(text) == parse_ip("::1")


@pytest.mark.parametrize("text", ["fe80::1%eth0", "localhost", "127.1", "", "[]"])
def test_parse_ip_refuses_scoped_and_non_addresses(text: str) -> None:
    assert parse_ip(text) is None
