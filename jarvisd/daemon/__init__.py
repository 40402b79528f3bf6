"""jarvisd, the background daemon: a Unix-socket server hosting ``ask`` and durable tasks.

See ``_protocol`` for the wire format, ``_tasks`` for how tasks run and recover,
``_server`` for the lifecycle.
"""

from ._client import Client
from ._protocol import PROTOCOL_VERSION, DaemonStatus, TaskInfo
from ._server import Daemon, DaemonPaths, ExitCode
from ._store import TaskStore
from ._tasks import TaskManager
from ._watch import Watcher, WatchFilter

__all__ = [
    "PROTOCOL_VERSION",
    "Client",
    "Daemon",
    "DaemonPaths",
    "DaemonStatus",
    "ExitCode",
    "TaskInfo",
    "TaskManager",
    "TaskStore",
    "WatchFilter",
    "Watcher",
]
