"""jarvisd, the background daemon: a Unix-socket server hosting ``ask`` and durable tasks.

See ``_protocol`` for the wire format, ``_tasks`` for how tasks run and recover,
``_server`` for the lifecycle. Names load on first use: a client (``jarvis ask``,
``jarvis task``) imports the protocol and the client, never the server, agents or
engines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr

if TYPE_CHECKING:
    from ._client import Client
    from ._host import DaemonHost
    from ._protocol import PROTOCOL_VERSION, DaemonStatus, TaskInfo
    from ._server import Daemon, DaemonPaths, ExitCode
    from ._store import TaskStore
    from ._tasks import TaskManager
    from ._watch import Watcher, WatchFilter

_LAZY = {
    "PROTOCOL_VERSION": "._protocol",
    "Client": "._client",
    "Daemon": "._server",
    "DaemonHost": "._host",
    "DaemonPaths": "._server",
    "DaemonStatus": "._protocol",
    "ExitCode": "._server",
    "TaskInfo": "._protocol",
    "TaskManager": "._tasks",
    "TaskStore": "._store",
    "WatchFilter": "._watch",
    "Watcher": "._watch",
}

__all__ = [
    "PROTOCOL_VERSION",
    "Client",
    "Daemon",
    "DaemonHost",
    "DaemonPaths",
    "DaemonStatus",
    "ExitCode",
    "TaskInfo",
    "TaskManager",
    "TaskStore",
    "WatchFilter",
    "Watcher",
]


__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
