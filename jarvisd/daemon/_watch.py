"""File watching for the daemon: config reload and ``task submit --watch``.

The watchdog handler only puts events on an asyncio queue (it runs in watchdog's
thread); :class:`WatchFilter` is a small callable deciding which paths matter; the loop
in :meth:`Watcher.run` debounces per watch key and takes a stop event.

Adding a recursive watch walks the whole tree (one inotify watch per directory: seconds
for tens of thousands), so it runs in a thread, never on the event loop; and
:func:`count_dirs` lets the daemon refuse a tree too large to watch before it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["WatchFilter", "Watcher", "count_dirs"]

log = logging.getLogger(__name__)

_IGNORED_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
)
_IGNORED_SUFFIXES = (".swp", ".swx", ".swo", "~", ".tmp", ".part")


@dataclass(frozen=True, slots=True)
class WatchFilter:
    """``filter(path) -> bool``: does a change to ``path`` count?

    Ignored: anything inside VCS and cache directories (``.git`` ...), editor swap and
    temporary files, and anything under ``ignore`` (the daemon's own directories, so
    the daemon's writes never trigger a re-run).
    """

    ignore: tuple[str, ...] = ()

    @classmethod
    def for_daemon(cls, dirs: Iterable[Path]) -> WatchFilter:
        return cls(tuple(os.path.realpath(d) for d in dirs))

    def __call__(self, path: str) -> bool:
        parts = Path(path).parts
        if any(part in _IGNORED_DIRS for part in parts):
            return False
        name = parts[-1] if parts else ""
        if name.endswith(_IGNORED_SUFFIXES) or name == "4913":  # vim's write probe
            return False
        real = os.path.realpath(path)
        return not any(real == d or real.startswith(d + os.sep) for d in self.ignore)


def count_dirs(root: Path, limit: int) -> int:
    """The directories in the tree at ``root`` (itself included, symlinks not followed),
    counted up to ``limit + 1`` at most: enough to know it is too many."""
    count, stack = 0, [str(root)]
    while stack and count <= limit:
        top = stack.pop()
        count += 1
        with contextlib.suppress(OSError), os.scandir(top) as entries:
            stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
    return count


class _QueueHandler:
    """watchdog handler: hands (key, path) to the loop's queue, nothing else."""

    def __init__(self, key: str, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any]):
        self.key, self.loop, self.queue = key, loop, queue

    def dispatch(self, event: Any) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return  # reads are not changes
        paths = [event.src_path, getattr(event, "dest_path", "")]
        for path in paths:
            if path:
                text = os.fsdecode(path)
                with contextlib.suppress(RuntimeError):  # loop closed during shutdown
                    self.loop.call_soon_threadsafe(self.queue.put_nowait, (self.key, text))


class Watcher:
    """Debounced, filtered change notifications keyed by name (a task id, "config")."""

    def __init__(self, debounce: float = 1.0) -> None:
        self.debounce = debounce
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._observer: Any = None
        self._watches: dict[str, tuple[Any, Callable[[str], bool]]] = {}

    def start(self) -> None:
        from watchdog.observers import Observer

        self._observer = Observer()
        self._observer.daemon = True
        self._observer.start()

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None

    @property
    def keys(self) -> list[str]:
        return list(self._watches)

    async def add(
        self, key: str, path: Path, accept: Callable[[str], bool], recursive: bool = True
    ) -> None:
        """Watch ``path`` (a directory) under ``key``; ``accept`` filters paths. The
        tree is walked in a thread (see the module docstring)."""
        observer = self._observer
        if observer is None:
            raise RuntimeError("Watcher.start() first")
        self.remove(key)
        handler = _QueueHandler(key, asyncio.get_running_loop(), self._queue)
        watch = await asyncio.to_thread(observer.schedule, handler, str(path), recursive=recursive)
        self._watches[key] = (watch, accept)

    def remove(self, key: str) -> None:
        entry = self._watches.pop(key, None)
        if entry is not None and self._observer is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._observer.unschedule(entry[0])

    async def run(
        self,
        stop: asyncio.Event,
        fire: Callable[[str], None],
        busy: Callable[[str], bool] = lambda key: False,
    ) -> None:
        """Call ``fire(key)`` once per burst of accepted changes, ``debounce`` seconds
        after the last one. Changes seen while ``busy(key)`` are dropped: they are the
        watched task's own writes."""
        due: dict[str, float] = {}
        stopper = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                timeout = max(0.0, min(due.values()) - time.monotonic()) if due else None
                getter = asyncio.ensure_future(self._queue.get())
                done, _ = await asyncio.wait(
                    {getter, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if getter in done:
                    key, path = getter.result()
                    entry = self._watches.get(key)
                    if entry is not None and entry[1](path) and not busy(key):
                        due[key] = time.monotonic() + self.debounce
                else:
                    getter.cancel()
                now = time.monotonic()
                for key in [k for k, t in due.items() if t <= now]:
                    del due[key]
                    if key in self._watches:
                        try:
                            fire(key)
                        except Exception:
                            log.exception("watch %s: handler failed", key)
        finally:
            stopper.cancel()
