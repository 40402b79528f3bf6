"""External agents the console installs (`jarvis agents install NAME` in a child
process), with their output kept for the page that shows the progress: bounded (the
last ``MAX_LINES`` lines of at most ``MAX_LINE`` characters each), one install of an
agent at a time, and every child ended when the daemon stops."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections import deque

__all__ = ["Install", "Installs"]

MAX_LINES = 500
MAX_LINE = 400
_READ = 4096


class Install:
    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: deque[str] = deque(maxlen=MAX_LINES)
        #: Lines ever added (the first kept one is number ``count - len(lines)``).
        self.count = 0
        self.returncode: int | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self._changed = asyncio.Event()

    @property
    def done(self) -> bool:
        return self.returncode is not None

    def changed(self) -> asyncio.Event:
        """Set at the next line or at the end; take it before reading."""
        if self._changed.is_set():
            self._changed = asyncio.Event()
        return self._changed

    def since(self, index: int) -> tuple[list[str], int]:
        """The kept lines from number ``index`` on, and the number after them."""
        first = self.count - len(self.lines)
        start = max(index, first)
        return list(self.lines)[start - first :], self.count

    def _add(self, line: str) -> None:
        self.lines.append(line[:MAX_LINE])
        self.count += 1
        self._changed.set()

    async def run(self, argv: list[str]) -> None:
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
            assert self.proc.stdout is not None
            pending = b""
            while chunk := await self.proc.stdout.read(_READ):
                pending += chunk
                *whole, pending = pending.split(b"\n")
                for line in whole:
                    self._add(line.decode("utf-8", "replace"))
                if len(pending) > MAX_LINE * 4:  # a line without end: cut it here
                    self._add(pending.decode("utf-8", "replace"))
                    pending = b""
            if pending:
                self._add(pending.decode("utf-8", "replace"))
            self.returncode = await self.proc.wait()
        except OSError as exc:
            self._add(f"could not start the install: {exc}")
            self.returncode = -1
        finally:
            if self.returncode is None:  # cancelled: the daemon stops
                with contextlib.suppress(ProcessLookupError):
                    if self.proc is not None:
                        self.proc.kill()
                self.returncode = -1
            self._changed.set()


class Installs:
    def __init__(self) -> None:
        self.runs: dict[str, Install] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, name: str) -> Install:
        """Install ``name`` (already checked against the installable agents), unless
        an install of it is running: then that one."""
        current = self.runs.get(name)
        if current is not None and not current.done:
            return current
        install = Install(name)
        self.runs[name] = install
        argv = [sys.executable, "-m", "jarvisd", "agents", "install", name]
        task = asyncio.get_running_loop().create_task(install.run(argv))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return install

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
