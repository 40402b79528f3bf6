"""The sandbox's side of a run's network access: how a program with no network reaches
the run's egress proxy (``jarvisd.netpolicy.EgressProxy``) and nothing else.

The sandbox keeps no network interface (docker ``--network none``, bwrap
``--unshare-net``): its loopback is its own. When a run allows hosts, the proxy's Unix
socket is bind-mounted at :data:`SOCKET_INSIDE`, and the prelude starts a forwarder
(``runners.acp_forward``) on the sandbox's own 127.0.0.1:\\ :data:`FORWARD_PORT` that
relays each connection to the socket, before the program starts. The proxy variables
point there, for the tools that read them (pip, npm, git, curl, Python's urllib). A
program that ignores them has no route at all: fail-closed by construction; the proxy
decides every connection that reaches it.

Standard library only (the prelude imports nothing of jarvis; these are the host's
helpers that build its arguments).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "FORWARD_PORT",
    "NO_PROXY",
    "PROXY_URL",
    "SOCKET_INSIDE",
    "egress_bind",
    "forward_args",
    "proxy_env",
]

#: The forwarder's port on the sandbox's own loopback (the usual HTTP proxy port).
FORWARD_PORT = 3128
#: Where the run's proxy socket appears inside the sandbox (a read-only bind).
SOCKET_INSIDE = "/opt/jarvis-net/egress.sock"
PROXY_URL = f"http://127.0.0.1:{FORWARD_PORT}"
#: What never goes through the proxy: the sandbox's own loopback, where the forwarders
#: listen (the proxy would refuse loopback anyway; this only saves a round trip).
NO_PROXY = "localhost,127.0.0.1,::1"


def proxy_env() -> dict[str, str]:
    """The environment that points a sandboxed program's tools at the forwarder."""
    env = {
        "HTTP_PROXY": PROXY_URL,
        "HTTPS_PROXY": PROXY_URL,
        "ALL_PROXY": PROXY_URL,
        "NO_PROXY": NO_PROXY,
        # pip and npm read these too, git only its own config (GIT_CONFIG_* is
        # configuration given in the environment, git >= 2.31).
        "PIP_PROXY": PROXY_URL,
        "npm_config_proxy": PROXY_URL,
        "npm_config_https_proxy": PROXY_URL,
        "npm_config_noproxy": NO_PROXY,
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.proxy",
        "GIT_CONFIG_VALUE_0": PROXY_URL,
    }
    # Lower-case twins: curl reads only http_proxy in lower case, others either.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        env[name.lower()] = env[name]
    return env


def egress_bind(socket_path: str) -> tuple[str, str, bool]:
    """The bind (host path, path inside, read only) that shows the run's proxy socket
    to the sandbox. Read-only: connecting to a socket needs no write to its mount."""
    return (socket_path, SOCKET_INSIDE, True)


def forward_args(uid: int, gid: int) -> Sequence[str]:
    """The prelude's arguments that start the forwarder (as ``uid``:``gid`` when the
    prelude runs as root: a separated runner's container starts as root)."""
    return ["--forward", SOCKET_INSIDE, str(FORWARD_PORT), str(uid), str(gid)]
