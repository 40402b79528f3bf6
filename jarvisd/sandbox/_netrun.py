"""A run's network access on the host: which hosts it may reach (its policy, from the
config, the agent's config and ``--allow-net``) and its egress proxy's lifetime.

One :class:`RunNetwork` per run: the proxy (``jarvisd.netpolicy.EgressProxy``) starts
before the sandbox, on a Unix socket in a private directory of its own (as root, only
the 0600 socket is handed to the sandbox user, so that user alone can connect), and stops after
it. Each connection the proxy sees, allowed or refused, is handed from the proxy's
thread to the run's loop (``call_soon_threadsafe``) and published there as a
``net_connect`` event; the run's outcome carries a summary (:class:`NetSummary`).

The default policy allows nothing: then no proxy starts, nothing is mounted and the
sandbox gets no proxy variables, exactly as without this module.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .._config import Config
from .._errors import JarvisError, UsageError

if TYPE_CHECKING:
    from ..netpolicy import EgressProxy, NetEvent, NetPolicy

__all__ = [
    "NO_POLICY_WARNING",
    "NetSummary",
    "RunNetwork",
    "network_policy",
]

#: Said (stderr, and the outcome) when hosts are allowed but the backend has no sandbox.
NO_POLICY_WARNING = (
    'sandbox.backend is "none": the program runs on the host with the host\'s network, '
    "and no network policy applies (--allow-net and sandbox.network are not enforced)"
)
#: Refused connections a summary names (the count covers them all).
MAX_NAMED_REFUSALS = 5


def network_policy(config: Config, allow: Sequence[str] = (), agent: str = "") -> NetPolicy:
    """The run's policy: ``[sandbox.network]``, then ``[agents.network] AGENT``, then
    ``allow`` (``--allow-net``), merged (a deny entry anywhere wins). UsageError or
    ConfigError naming the entry when one does not parse."""
    from ..netpolicy import NetPolicy

    net = config.sandbox.network
    policy = _parse(
        NetPolicy.parse,
        allow=list(net.allow),
        deny=list(net.deny),
        hosts=dict(net.hosts),
        source="sandbox.network",
    )
    per_agent = config.agents.network.get(agent) if agent else None
    if per_agent:
        policy = policy.merged(
            _parse(NetPolicy.parse, allow=list(per_agent), source=f"agents.network.{agent}")
        )
    if allow:
        policy = policy.merged(_parse(NetPolicy.parse, allow=list(allow), source="--allow-net"))
    return policy


def _parse(parse: Callable[..., NetPolicy], **kwargs: Any) -> NetPolicy:
    try:
        return parse(**kwargs)
    except JarvisError:
        raise
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{kwargs['source']}: {exc}") from exc


@dataclass(slots=True)
class NetSummary:
    """What a run's sandbox did on the network, for its outcome."""

    connections: int = 0
    refused: int = 0
    #: The first MAX_NAMED_REFUSALS refused "host:port", in order.
    refused_hosts: list[str] = field(default_factory=list)
    bytes_up: int = 0
    bytes_down: int = 0

    def add(self, event: NetEvent) -> None:
        self.connections += 1
        self.bytes_up += max(0, int(event.bytes_up))
        self.bytes_down += max(0, int(event.bytes_down))
        if not event.allowed:
            self.refused += 1
            if len(self.refused_hosts) < MAX_NAMED_REFUSALS:
                # A request too malformed to name a host says so instead.
                target = f"{event.host}:{event.port}" if event.host else "a malformed request"
                self.refused_hosts.append(target)

    def line(self) -> str:
        """``network: 3 connections, 1 refused (evil.com:443)``."""
        text = f"network: {self.connections} connection{'s' * (self.connections != 1)}"
        if self.refused:
            more = self.refused - len(self.refused_hosts)
            named = ", ".join(self.refused_hosts) + (f" and {more} more" if more > 0 else "")
            text += f", {self.refused} refused ({named})"
        return text

    def to_dict(self) -> dict[str, object]:
        return {
            "connections": self.connections,
            "refused": self.refused,
            "refused_hosts": list(self.refused_hosts),
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "line": self.line(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NetSummary:
        return cls(
            int(data.get("connections") or 0),
            int(data.get("refused") or 0),
            [str(h) for h in data.get("refused_hosts") or ()][:MAX_NAMED_REFUSALS],
            int(data.get("bytes_up") or 0),
            int(data.get("bytes_down") or 0),
        )


class RunNetwork:
    """One run's egress proxy (an async context manager): ``socket_path`` is what the
    run's sandboxes mount (``ExecRequest.proxy_socket``); ``publish`` is called on the
    run's loop with each connection's event; ``summary`` counts them."""

    def __init__(
        self,
        policy: NetPolicy,
        *,
        uid: int | None = None,
        gid: int | None = None,
        publish: Callable[[NetEvent], None] | None = None,
    ) -> None:
        self.policy = policy
        self.publish = publish
        self.summary = NetSummary()
        self.socket_path = ""
        self._ids = (uid, gid) if uid is not None and gid is not None else None
        self._dir: Path | None = None
        self._proxy: EgressProxy | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> RunNetwork:
        from ..netpolicy import EgressProxy

        self._loop = asyncio.get_running_loop()
        # Ours, and only the socket is handed to the sandbox user (the one who connects):
        # a directory it owned would let any host account with that uid swap the socket
        # for its own. As root the directory is 0711, so that bwrap, which mounts as the
        # sandbox user, can reach the socket without listing or writing the directory.
        self._dir = Path(tempfile.mkdtemp(prefix="jarvis-net-"))
        try:
            owner = None
            if os.geteuid() == 0 and self._ids is not None:
                os.chmod(self._dir, 0o711)
                owner = self._ids[0]
            self.socket_path = str(self._dir / "egress.sock")
            self._proxy = EgressProxy(
                self.policy, self.socket_path, on_event=self._from_proxy, owner_uid=owner
            )
            await asyncio.to_thread(self._proxy.start)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._proxy is not None:
                # Events it hands over while stopping land on the loop before this
                # returns (the same queue, in order).
                await asyncio.to_thread(self._proxy.stop)
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)

    def _from_proxy(self, event: NetEvent) -> None:
        """On the proxy's thread: hand the event to the run's loop."""
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._record, event)
        except RuntimeError:  # the loop is closed: the run is over
            pass

    def _record(self, event: NetEvent) -> None:
        self.summary.add(event)
        if self.publish is not None:
            self.publish(event)
