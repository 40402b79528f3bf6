"""Network policy for sandboxed runs: a fail-closed egress allowlist.

A sandbox has no network interface. When its run's policy allows hosts, a proxy on
the host (:class:`EgressProxy`, one per run) is reachable through a Unix socket
mounted into the sandbox; it serves HTTP CONNECT and plain HTTP to allowed hosts
only, resolves names itself and refuses private, loopback, link-local and metadata
addresses (unless an exact entry names one), and reports every connection as a
:class:`NetEvent`.

    policy = NetPolicy.parse(allow=["pypi.org", "*.pythonhosted.org"], source="--allow-net")
    with EgressProxy(policy, run_dir / "egress.sock", on_event=report) as proxy:
        ...  # the sandbox runs with HTTPS_PROXY pointing at its forwarder

Modules: ``_policy`` (entries, decisions), ``_addresses`` (address classes),
``_connect`` (resolve, check, connect), ``_tls`` (SNI of a ClientHello), ``_http``
(targets, headers, refusals), ``_session`` (one connection), ``_proxy`` (the
socket, the thread, the bounds), ``_events`` (events and limits).
"""

from __future__ import annotations

from ._addresses import classify
from ._events import NetEvent, NetLimits
from ._policy import NetDecision, NetEntry, NetPolicy
from ._proxy import EgressProxy

__all__ = [
    "EgressProxy",
    "NetDecision",
    "NetEntry",
    "NetEvent",
    "NetLimits",
    "NetPolicy",
    "classify",
]
