"""The egress policy: which hosts and ports a sandboxed run may reach.

Entries are an exact host (``pypi.org``), a wildcard over subdomains
(``*.pythonhosted.org``: any name below it, never the suffix itself), or an IP
address (``10.0.0.5``, ``[fd00::5]``), each with an optional ``:port``. Without a
port an allow entry means ports 443 and 80, and a deny entry every port. Names are
compared case-insensitively, without a trailing dot. A deny entry wins over any
allow entry. ``hosts`` maps names to addresses for the proxy (a LAN mirror).

Two checks, both needed: :meth:`NetPolicy.decide` on the name the client asked for,
then :meth:`NetPolicy.admit_address` on each address the proxy is about to connect
to (see ``_addresses`` for the classes and what can unlock them).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from jarvisd._errors import ConfigError

from ._addresses import LAN, LOCAL, NEVER, PUBLIC, IPAddress, classify, parse_ip

__all__ = ["NetDecision", "NetEntry", "NetPolicy", "format_target", "normalize_host"]

DEFAULT_PORTS: Final = (443, 80)
#: Bounds on what a config file or a command line may hand the parser.
MAX_ENTRIES: Final = 1000
MAX_ENTRY_CHARS: Final = 300
_LABEL: Final = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\Z")
_ENTRY_SHAPE: Final = "a host, *.suffix or IP address, with an optional :port"


class _BadHost(ValueError):
    pass


def normalize_host(text: str) -> str:
    """``text`` as the policy compares it: lower case, no trailing dot; an IP address
    in its compressed form (IPv6 without brackets). Raises ValueError (why)."""
    ip = parse_ip(text)
    if ip is not None:
        return ip.compressed
    if text.startswith("["):
        raise _BadHost("not an IPv6 address in brackets")
    host = text.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host or len(host) > 253:
        raise _BadHost("empty or longer than 253 characters")
    if not host.isascii():
        raise _BadHost("not ASCII: write an international name in its xn-- form")
    labels = host.split(".")
    for label in labels:
        if not _LABEL.match(label):
            raise _BadHost(f"the label {label!r} is not letters, digits, '-' or '_'")
    # "127.1", "0x7f000001", "2130706433": C resolvers read these as IPv4 addresses.
    # A real top-level domain is never numeric, so such a name is refused as a name.
    if labels[-1].isdigit() or _inet_aton(host):
        raise _BadHost("a numeric name that resolvers read as an IPv4 address")
    return host


def _inet_aton(host: str) -> bool:
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return True


def format_target(host: str, port: int) -> str:
    """``host:port`` with IPv6 addresses in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class NetEntry:
    """One allow or deny entry, parsed."""

    text: str  # as written back by to_dict: normalized
    host: str  # the name, the wildcard's suffix, or the address (compressed)
    wildcard: bool
    ports: tuple[int, ...] | None  # None: the kind's default
    ip: IPAddress | None

    @classmethod
    def parse(cls, raw: str) -> NetEntry:
        """Raises ValueError saying what is wrong."""
        text = raw.strip()
        if not text:
            raise ValueError("an empty entry")
        if len(text) > MAX_ENTRY_CHARS:
            raise ValueError(f"longer than {MAX_ENTRY_CHARS} characters")
        host, ports = _split_port(text)
        wildcard = host.startswith("*.")
        if wildcard:
            host = host[2:]
        if "*" in host:
            raise ValueError("'*' is only allowed as the first label ('*.example.com')")
        try:
            name = normalize_host(host)
        except _BadHost as exc:
            raise ValueError(str(exc)) from None
        ip = parse_ip(name)
        if wildcard and ip is not None:
            raise ValueError("a wildcard over an IP address")
        if wildcard and "." not in name:
            raise ValueError("a wildcard over a whole top-level domain")
        shown = ("*." if wildcard else "") + (
            f"[{name}]" if ip is not None and ip.version == 6 else name
        )
        if ports is not None:
            shown += f":{ports[0]}"
        return cls(text=shown, host=name, wildcard=wildcard, ports=ports, ip=ip)

    def matches(self, host: str, port: int, default_ports: tuple[int, ...] | None) -> bool:
        """Whether this entry covers normalized ``host`` at ``port``; ``default_ports``
        is what an entry without a port covers (None: every port)."""
        ports = self.ports if self.ports is not None else default_ports
        if ports is not None and port not in ports:
            return False
        if self.wildcard:
            # Any depth below the suffix, never an IP address (no label ends in a digit
            # group only, but "*.0.1" style suffixes are refused at parse anyway).
            return host.endswith("." + self.host) and parse_ip(host) is None
        return host == self.host


def _split_port(text: str) -> tuple[str, tuple[int, ...] | None]:
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError("an IPv6 address without its closing ']'")
        host, rest = text[: end + 1], text[end + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise ValueError("text after the IPv6 address's ']'")
        return host, (_port(rest[1:]),)
    if text.count(":") > 1:
        raise ValueError("an IPv6 address must be written in brackets: [2001:db8::1]:443")
    host, sep, port = text.partition(":")
    return host, ((_port(port),) if sep else None)


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"the port {text!r} is not a number from 1 to 65535")
    return int(text)


@dataclass(frozen=True)
class NetDecision:
    """A verdict of the policy; ``reason`` is said to the user as it is."""

    allowed: bool
    reason: str
    #: The allow entry that matched (when allowed), as written.
    entry: str = ""
    #: Whether that entry is exact (not a wildcard): only exact entries reach
    #: private addresses.
    exact: bool = False
    #: When refused: the allow entry that would admit the request, if one would.
    hint: str = ""


@dataclass(frozen=True)
class NetPolicy:
    """An allowlist with a denylist and a hosts map. Cheap, immutable, comparable."""

    allow: tuple[NetEntry, ...] = ()
    deny: tuple[NetEntry, ...] = ()
    hosts: tuple[tuple[str, str], ...] = ()  # (name, address), sorted
    source: str = ""

    # -- building ---------------------------------------------------------------------

    @classmethod
    def parse(
        cls,
        allow: Iterable[str] | str = (),
        deny: Iterable[str] | str = (),
        hosts: Mapping[str, str] | None = None,
        source: str = "",
    ) -> NetPolicy:
        """Entries as a user writes them (a string may hold several, comma-separated).
        Raises ConfigError naming ``source``, the list and the bad entry."""
        where = source or "network policy"
        return cls(
            allow=_entries(allow, where, "allow"),
            deny=_entries(deny, where, "deny"),
            hosts=_hosts(hosts or {}, where),
            source=source,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NetPolicy:
        if not isinstance(data, Mapping):
            raise ConfigError("network policy", "", "a table", type(data).__name__)
        hosts = data.get("hosts") or {}
        return cls.parse(
            allow=data.get("allow") or (),
            deny=data.get("deny") or (),
            hosts=hosts,
            source=str(data.get("source") or ""),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "allow": [e.text for e in self.allow],
            "deny": [e.text for e in self.deny],
            "hosts": dict(self.hosts),
            "source": self.source,
        }

    def merged(self, other: NetPolicy) -> NetPolicy:
        """Both policies' allows and denies (a deny of either still wins); ``other``'s
        hosts map wins where both name a host."""
        hosts = dict(self.hosts)
        hosts.update(other.hosts)
        sources = [s for s in (self.source, other.source) if s]
        return NetPolicy(
            allow=_union(self.allow, other.allow),
            deny=_union(self.deny, other.deny),
            hosts=tuple(sorted(hosts.items())),
            source=" + ".join(dict.fromkeys(sources)),
        )

    # -- deciding ---------------------------------------------------------------------

    @property
    def empty(self) -> bool:
        """Nothing is allowed (the default: no network at all)."""
        return not self.allow

    def mapped(self, host: str) -> IPAddress | None:
        """The address ``hosts`` maps normalized ``host`` to, if any."""
        for name, address in self.hosts:
            if name == host:
                return parse_ip(address)
        return None

    def decide(self, host: str, port: int) -> NetDecision:
        """The name-level verdict on a request for ``host:port``."""
        try:
            name = normalize_host(host)
        except ValueError as exc:
            return NetDecision(False, f"{host[:80]!r} is not a valid host name ({exc})")
        if not 0 < port < 65536:
            return NetDecision(False, f"port {port} is not a valid port")
        for entry in self.deny:
            if entry.matches(name, port, None):
                return NetDecision(False, f"denied by the deny entry {entry.text!r}")
        best: NetEntry | None = None
        for entry in self.allow:
            if entry.matches(name, port, DEFAULT_PORTS) and (best is None or best.wildcard):
                best = entry
        if best is None:
            hint = _entry_for(name, port)
            if parse_ip(name) is not None:
                return NetDecision(False, "an IP address that no allow entry names", hint=hint)
            return NetDecision(False, "not in the allowlist", hint=hint)
        return NetDecision(True, f"allowed by {best.text!r}", best.text, not best.wildcard)

    def admit_address(
        self, decision: NetDecision, ip: IPAddress, *, named: bool, host: str = "", port: int = 443
    ) -> NetDecision:
        """The verdict on connecting to ``ip`` for an allowed ``decision`` (on
        ``host:port``, named in a refusal's hint). ``named``:
        the address was written by the user (an IP entry, or the ``hosts`` map), not
        answered by DNS."""
        if not decision.allowed:
            return decision
        kind = classify(ip)
        if kind == PUBLIC:
            return decision
        if kind in NEVER:
            return NetDecision(False, f"{ip} is a {kind} address, which is never reached")
        if not decision.exact:
            return NetDecision(
                False,
                f"it resolves to {ip}, a {kind} address, and a wildcard entry "
                f"({decision.entry}) never reaches one: allow the exact host",
                # The exact entry reaches it only where an exact entry may.
                hint=_entry_for(host, port) if kind in LAN or named else "",
            )
        if kind in LAN or (kind in LOCAL and named):
            return decision
        return NetDecision(
            False,
            f"it resolves to {ip}, a {kind} address, which a name resolved through DNS "
            "never reaches: allow the address itself, or map the name to it in the "
            "policy's hosts",
        )


def _entry_for(host: str, port: int) -> str:
    """The allow entry a user would write for exactly ``host:port``."""
    shown = f"[{host}]" if ":" in host else host
    return shown if port in DEFAULT_PORTS else f"{shown}:{port}"


def _union(a: tuple[NetEntry, ...], b: tuple[NetEntry, ...]) -> tuple[NetEntry, ...]:
    return tuple(dict.fromkeys(a + b))


def _entries(raw: Iterable[str] | str, where: str, kind: str) -> tuple[NetEntry, ...]:
    items: list[str] = []
    values = [raw] if isinstance(raw, str) else raw
    if isinstance(values, Mapping) or not isinstance(values, Iterable):
        raise ConfigError(where, kind, "a list of hosts", type(raw).__name__)
    for value in values:
        if not isinstance(value, str):
            raise ConfigError(where, kind, "a list of strings", value)
        items.extend(part for part in value.split(",") if part.strip())
        if len(items) > MAX_ENTRIES:
            raise ConfigError(where, kind, f"at most {MAX_ENTRIES} entries")
    parsed: list[NetEntry] = []
    for item in items:
        try:
            parsed.append(NetEntry.parse(item))
        except ValueError as exc:
            raise ConfigError(
                where, kind, f"{_ENTRY_SHAPE} ({exc})", item.strip()[:MAX_ENTRY_CHARS]
            ) from None
    return tuple(dict.fromkeys(parsed))


def _hosts(raw: Mapping[str, str], where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, Mapping):
        raise ConfigError(where, "hosts", "a table of host = address", type(raw).__name__)
    if len(raw) > MAX_ENTRIES:
        raise ConfigError(where, "hosts", f"at most {MAX_ENTRIES} entries")
    out: dict[str, str] = {}
    for name, address in raw.items():
        if not isinstance(name, str) or not isinstance(address, str):
            raise ConfigError(where, "hosts", "host names mapped to IP address strings", name)
        try:
            host = normalize_host(name[:MAX_ENTRY_CHARS])
        except ValueError as exc:
            raise ConfigError(where, "hosts", f"a host name ({exc})", name[:80]) from None
        if parse_ip(host) is not None:
            raise ConfigError(where, "hosts", "a host name, not an address", name)
        ip = parse_ip(address.strip())
        if ip is None:
            raise ConfigError(where, f"hosts.{host}", "an IP address", address[:80])
        out[host] = ip.compressed
    return tuple(sorted(out.items()))
