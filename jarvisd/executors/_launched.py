"""A code process the launcher (``_launcher``) started for a separated runner, seen
from the runner's event loop as an ``asyncio.subprocess.Process`` is: ``pid``,
``returncode``, ``stdin``, ``stdout``, ``stderr`` and ``wait()``.

The runner made the pipes and keeps its ends; the process is the launcher's child, so
its exit status comes down a status pipe (the launcher writes it, then closes the pipe).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence

from ._launcher import Launcher

__all__ = ["LaunchedProcess"]


class LaunchedProcess:
    def __init__(
        self,
        pid: int,
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        status: asyncio.StreamReader,
        transports: Sequence[asyncio.BaseTransport],
    ) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._transports = transports
        self._status = asyncio.ensure_future(self._read_status(status))

    @classmethod
    async def start(
        cls,
        launcher: Launcher,
        argv: Sequence[str],
        env: dict[str, str],
        cwd: str,
        limits: Sequence[tuple[int, int]],
        limit: int,
    ) -> LaunchedProcess:
        ours: list[int] = []
        theirs: list[int] = []
        for child_reads in (True, False, False, False):  # stdin, stdout, stderr, status
            r, w = os.pipe()
            ours.append(w if child_reads else r)
            theirs.append(r if child_reads else w)
        try:
            pid = launcher.spawn(argv, env, cwd, limits, theirs)
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        loop = asyncio.get_running_loop()
        readers: list[asyncio.StreamReader] = []
        transports: list[asyncio.BaseTransport] = []
        for fd in ours[1:]:
            reader = asyncio.StreamReader(limit=limit)
            transport, _ = await loop.connect_read_pipe(
                lambda r=reader: asyncio.StreamReaderProtocol(r),  # type: ignore[misc]
                os.fdopen(fd, "rb", buffering=0),
            )
            readers.append(reader)
            transports.append(transport)
        # A StreamReaderProtocol also gives the writer its drain and wait_closed.
        write_transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()),
            os.fdopen(ours[0], "wb", buffering=0),
        )
        stdin = asyncio.StreamWriter(write_transport, protocol, None, loop)
        stdout, stderr, status = readers
        return cls(pid, stdin, stdout, stderr, status, [write_transport, *transports])

    async def _read_status(self, status: asyncio.StreamReader) -> int:
        text = (await status.read()).decode("ascii", "replace").strip()
        try:
            self.returncode = int(text)
        except ValueError:  # the launcher went without saying: count it killed
            self.returncode = -signal.SIGKILL
        return self.returncode

    async def wait(self) -> int:
        return await asyncio.shield(self._status)

    def close(self) -> None:
        """Close the runner's ends of the pipes (after the process is gone)."""
        for transport in self._transports:
            with contextlib.suppress(Exception):
                transport.close()
