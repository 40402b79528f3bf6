"""The policy: entries parse (or fail naming the entry and where it came from), and
decisions follow the rules: exact or wildcard, default ports 443 and 80, deny wins,
IP literals only when named, exact entries only reach private addresses."""

from __future__ import annotations

import pytest

from jarvisd._errors import ConfigError
from jarvisd.netpolicy import NetPolicy
from jarvisd.netpolicy._addresses import parse_ip

POLICY = NetPolicy.parse(
    allow=["pypi.org", "*.pythonhosted.org", "files.example:8443", "10.0.0.5:3141",
           "[fd00::5]", "Mirror.LAN."],
    deny=["evil.pythonhosted.org"],
    hosts={"mirror.lan": "10.0.0.5"},
    source="--allow-net",
)  # fmt: skip


@pytest.mark.parametrize(
    ("host", "port", "allowed"),
    [
        ("pypi.org", 443, True),
        ("PyPI.ORG.", 80, True),  # case and a trailing dot do not matter
        ("pypi.org", 8080, False),  # no port: 443 and 80 only
        ("www.pypi.org", 443, False),  # exact is exact
        ("files.pythonhosted.org", 443, True),
        ("a.b.pythonhosted.org", 443, True),  # any depth
        ("pythonhosted.org", 443, False),  # a wildcard is not its suffix
        ("evilpythonhosted.org", 443, False),  # a label boundary, not a string suffix
        ("evil.pythonhosted.org", 443, False),  # deny wins over the wildcard
        ("EVIL.pythonhosted.org.", 8443, False),  # a deny entry without a port: every port
        ("files.example", 8443, True),
        ("files.example", 443, False),
        ("10.0.0.5", 3141, True),
        ("10.0.0.5", 443, False),
        ("10.0.0.6", 3141, False),  # an IP literal no entry names
        ("fd00::5", 443, True),
        ("[fd00::5]", 80, True),
        ("fd00:0::5", 443, True),  # the same address, written otherwise
        ("mirror.lan", 443, True),
        ("127.1", 80, False),  # resolvers read these as 127.0.0.1
        ("0x7f000001", 80, False),
        ("2130706433", 80, False),
        ("pypi.org\r\nHost: x", 443, False),
        ("", 443, False),
        ("pypi.org", 0, False),
    ],
)
def test_decisions(host: str, port: int, allowed: bool) -> None:
    decision = POLICY.decide(host, port)
    assert decision.allowed is allowed, decision
    assert decision.reason


@pytest.mark.parametrize("host", ["127.1", "0x7f000001", "2130706433", "0x7f.1", "10.1"])
def test_numeric_names_are_refused_as_names(host: str) -> None:
    # Even under an entry that would match them: resolvers read them as addresses.
    decision = NetPolicy.parse(allow=["*.lan.example"]).decide(host, 80)
    assert not decision.allowed
    assert "resolvers read as an IPv4 address" in decision.reason


def test_a_refusal_says_why_and_what_would_allow_it() -> None:
    denied = POLICY.decide("evil.pythonhosted.org", 443)
    assert "deny entry 'evil.pythonhosted.org'" in denied.reason
    assert denied.hint == ""  # no allow entry helps against a deny entry
    missing = POLICY.decide("example.com", 8080)
    assert missing.reason == "not in the allowlist"
    assert missing.hint == "example.com:8080"
    assert POLICY.decide("::1", 443).hint == "[::1]"


@pytest.mark.parametrize(
    ("address", "exact", "named", "allowed"),
    [
        ("93.184.216.34", False, False, True),  # public: any entry
        ("10.1.2.3", True, False, True),  # a LAN mirror by name
        ("10.1.2.3", False, False, False),  # wildcards never reach private addresses
        ("100.64.0.1", False, False, False),
        ("fd12::1", False, False, False),
        # Reserved ranges (documentation, benchmarking) are a LAN's kind: some networks
        # serve their package index there (pypi.org is 203.0.113.80 on jarvis's CI).
        ("203.0.113.80", True, False, True),
        ("198.18.0.1", True, False, True),
        ("203.0.113.80", False, False, False),
        ("127.0.0.1", True, False, False),  # loopback through DNS: never (rebinding)
        ("127.0.0.1", True, True, True),  # ... but named by the user: yes
        ("::ffff:127.0.0.1", True, False, False),
        ("169.254.169.254", True, True, False),  # metadata: never, even named
        ("fd00:ec2::254", True, True, False),
        ("0.0.0.0", True, True, False),
        ("224.0.0.1", True, True, False),
    ],
)
def test_addresses_an_entry_can_reach(
    address: str, exact: bool, named: bool, allowed: bool
) -> None:
    entry = "host.example" if exact else "*.lan.example"
    policy = NetPolicy.parse(allow=[entry])
    decision = policy.decide("host.example" if exact else "a.lan.example", 443)
    assert decision.allowed and decision.exact is exact
    ip = parse_ip(address)
    assert ip is not None
    verdict = policy.admit_address(decision, ip, named=named, host="host.example", port=443)
    assert verdict.allowed is allowed, verdict


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("*", "first label"),
        ("*.com", "top-level"),
        ("a.*.com", "first label"),
        ("pypi.org:abc", "port 'abc'"),
        ("pypi.org:0", "port '0'"),
        ("pypi.org:65536", "port '65536'"),
        ("::1", "brackets"),
        ("[::1", "closing"),
        ("[::1]x", "after"),
        ("[pypi.org]", "IPv6"),
        ("*.10.0.0.1", "over an IP address"),
        ("*.0.0.1", "numeric"),
        ("pypi org", "label"),
        ("-pypi.org", "label"),
        ("http://pypi.org", "port"),
        ("x" * 400, "longer than"),
        ("127.1", "numeric"),
        ("bücher.example", "xn-- form"),
    ],
)
def test_bad_entries_name_the_entry_and_the_source(entry: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        NetPolicy.parse(allow=["pypi.org", entry], source="--allow-net")
    message = str(info.value)
    assert message.startswith("--allow-net: allow: expected"), message
    assert words in message, message
    assert repr(entry.strip()[:300]) in message


def test_bad_shapes_and_hosts_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"config\.toml: deny"):
        NetPolicy.parse(deny=[3], source="config.toml")  # type: ignore[list-item]
    with pytest.raises(ConfigError, match=r"hosts\.mirror\.lan: expected an IP address"):
        NetPolicy.parse(hosts={"mirror.lan": "not-an-ip"}, source="x")
    with pytest.raises(ConfigError, match="a host name"):
        NetPolicy.parse(hosts={"10.0.0.1": "10.0.0.2"}, source="x")
    with pytest.raises(ConfigError, match="at most 1000"):
        NetPolicy.parse(allow=",".join(f"h{i}.example" for i in range(1001)))


def test_comma_separated_entries_as_a_flag_gives_them() -> None:
    policy = NetPolicy.parse(allow="pypi.org, *.pythonhosted.org,,", source="--allow-net")
    assert [e.text for e in policy.allow] == ["pypi.org", "*.pythonhosted.org"]


def test_empty_merged_and_round_trip() -> None:
    assert NetPolicy().empty
    assert NetPolicy.parse(deny=["x.example"]).empty  # denies alone allow nothing
    assert not POLICY.empty
    other = NetPolicy.parse(allow=["evil.pythonhosted.org", "npmjs.org"],
                            hosts={"mirror.lan": "10.0.0.6"}, source="config")  # fmt: skip
    both = POLICY.merged(other)
    assert both.decide("npmjs.org", 443).allowed
    assert not both.decide("evil.pythonhosted.org", 443).allowed  # deny still wins
    assert both.mapped("mirror.lan") == parse_ip("10.0.0.6")
    assert both.source == "--allow-net + config"
    assert NetPolicy.from_dict(both.to_dict()) == both
    assert NetPolicy.from_dict(NetPolicy().to_dict()).empty
    with pytest.raises(ConfigError):
        NetPolicy.from_dict({"allow": "a.example", "hosts": ["x"]})
