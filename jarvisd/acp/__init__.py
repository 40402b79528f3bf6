"""``jarvis acp``: jarvis as an Agent Client Protocol agent on stdio.

- :func:`serve` answers one client on a pair of streams (:func:`serve_stdio`: stdin
  and stdout), with :class:`JarvisAcpAgent` behind the bounded wire
  (:class:`BoundedNdjson`);
- :class:`SessionStore` keeps every session's history, for ``session/load`` and
  ``jarvis acp sessions``.

Names load on first use: the ACP SDK (pydantic models) is imported only when served.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr

if TYPE_CHECKING:
    from ._agent import JarvisAcpAgent
    from ._serve import serve
    from ._stdio import serve_stdio
    from ._store import SessionHeader, SessionStore
    from ._wire import MAX_LINE_BYTES, BoundedNdjson, check_message

_LAZY = {
    "MAX_LINE_BYTES": "._wire",
    "BoundedNdjson": "._wire",
    "JarvisAcpAgent": "._agent",
    "SessionHeader": "._store",
    "SessionStore": "._store",
    "check_message": "._wire",
    "serve": "._serve",
    "serve_stdio": "._stdio",
}

__all__ = [
    "MAX_LINE_BYTES",
    "BoundedNdjson",
    "JarvisAcpAgent",
    "SessionHeader",
    "SessionStore",
    "check_message",
    "serve",
    "serve_stdio",
]

__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
