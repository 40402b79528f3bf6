"""The answer to ``initialize``, as plain JSON.

``jarvis acp`` answers a client's ``initialize`` before the ACP SDK (pydantic models,
over a second to import on a loaded machine) is loaded: an editor starting jarvis waits
for this answer, not for the imports, which go on meanwhile. :class:`JarvisAcpAgent`
answers a later ``initialize`` from the same function, so the two cannot differ.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PROTOCOL_VERSION", "initialize_reply"]

#: The ACP protocol version jarvis speaks (``acp.PROTOCOL_VERSION`` of the SDK pinned;
#: a test keeps them equal).
PROTOCOL_VERSION = 1


def initialize_reply(params: object) -> dict[str, Any] | None:
    """The result of ``initialize`` with ``params``, or None when the params are not
    a plain request (the SDK then answers, with its own validation error)."""
    if not isinstance(params, dict):
        return None
    version = params.get("protocolVersion")
    if not isinstance(version, int) or isinstance(version, bool):
        return None
    from .._version import __version__

    return {
        "protocolVersion": max(0, min(version, PROTOCOL_VERSION)),
        "agentCapabilities": {
            "loadSession": True,
            # No jarvis agent takes images yet: say so rather than drop them.
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": False, "sse": False, "acp": False},
            "sessionCapabilities": {"list": {}},
        },
        "authMethods": [],
        "agentInfo": {"name": "jarvis", "title": "jarvis", "version": __version__},
    }


def client_fs(params: object) -> tuple[bool, bool]:
    """Whether the client offers ``fs/read_text_file`` (its open buffers) and
    ``fs/write_text_file``."""
    caps = params.get("clientCapabilities") if isinstance(params, dict) else None
    fs = caps.get("fs") if isinstance(caps, dict) else None
    if not isinstance(fs, dict):
        return False, False
    return fs.get("readTextFile") is True, fs.get("writeTextFile") is True
