"""An agent's terminal requests (``terminal/*``) on the host, for agents run with
``--no-sandbox`` only (a sandboxed agent is not offered terminals: its own shell tool
runs inside the container, where a command belongs).

Each command starts in its own process group, in a directory inside the workspace,
with a minimal environment; its output is kept in bounded bytes (the tail, as ACP's
``outputByteLimit`` asks), and every group still running is killed when the session
ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .._errors import ToolError

__all__ = ["MAX_OUTPUT_BYTES", "MAX_TERMINALS", "Terminals"]

MAX_OUTPUT_BYTES = 1024 * 1024
MAX_TERMINALS = 16
_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "TZ")


@dataclass(slots=True)
class _Terminal:
    process: asyncio.subprocess.Process
    limit: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    reader: asyncio.Task[None] | None = None

    def keep(self, chunk: bytes) -> None:
        self.output += chunk
        if len(self.output) > self.limit:
            # Cut at a character boundary: the tail must still decode.
            cut = len(self.output) - self.limit
            while cut < len(self.output) and (self.output[cut] & 0xC0) == 0x80:
                cut += 1
            del self.output[:cut]
            self.truncated = True


class Terminals:
    def __init__(self, home: Path) -> None:
        self.home = home
        self._terminals: dict[str, _Terminal] = {}
        self._ids = itertools.count(1)

    async def create(
        self,
        command: str,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        output_limit: int | None,
    ) -> str:
        if len(self._terminals) >= MAX_TERMINALS:
            raise ToolError(f"at most {MAX_TERMINALS} terminals at once: release one first")
        environ = {k: os.environ[k] for k in _ENV_KEEP if k in os.environ}
        environ.update(HOME=str(self.home), TMPDIR=str(self.home))
        environ.update({str(k): str(v) for k, v in env.items()})
        try:
            process = await asyncio.create_subprocess_exec(
                command,
                *args,
                cwd=str(cwd),
                env=environ,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            raise ToolError(f"cannot start {command!r}: {exc}") from exc
        limit = (
            MAX_OUTPUT_BYTES if not output_limit else min(max(output_limit, 1), MAX_OUTPUT_BYTES)
        )
        terminal = _Terminal(process, limit)
        terminal.reader = asyncio.ensure_future(self._read(terminal))
        terminal_id = f"term-{next(self._ids)}"
        self._terminals[terminal_id] = terminal
        return terminal_id

    @staticmethod
    async def _read(terminal: _Terminal) -> None:
        stream = terminal.process.stdout
        if stream is None:
            return
        while chunk := await stream.read(65536):
            terminal.keep(chunk)

    def _get(self, terminal_id: str) -> _Terminal:
        terminal = self._terminals.get(terminal_id)
        if terminal is None:
            raise ToolError(f"no terminal {terminal_id!r}")
        return terminal

    def output(self, terminal_id: str) -> tuple[str, bool, int | None, str | None]:
        """(output, truncated, exit code, signal name) so far."""
        terminal = self._get(terminal_id)
        code, sig = _status(terminal.process.returncode)
        return terminal.output.decode("utf-8", "replace"), terminal.truncated, code, sig

    async def wait(self, terminal_id: str) -> tuple[int | None, str | None]:
        terminal = self._get(terminal_id)
        returncode = await terminal.process.wait()
        if terminal.reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(terminal.reader, 5)
        return _status(returncode)

    def kill(self, terminal_id: str) -> None:
        _kill_group(self._get(terminal_id).process)

    async def release(self, terminal_id: str) -> None:
        terminal = self._terminals.pop(terminal_id, None)
        if terminal is not None:
            await _end(terminal)

    async def close(self) -> None:
        terminals, self._terminals = list(self._terminals.values()), {}
        for terminal in terminals:
            await _end(terminal)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _end(terminal: _Terminal) -> None:
    _kill_group(terminal.process)  # also what it left behind in its group
    with contextlib.suppress(Exception):
        await asyncio.wait_for(terminal.process.wait(), 5)
    if terminal.reader is not None:
        terminal.reader.cancel()
        with contextlib.suppress(BaseException):
            await terminal.reader


def _status(returncode: int | None) -> tuple[int | None, str | None]:
    if returncode is None:
        return None, None
    if returncode < 0:
        try:
            return None, signal.Signals(-returncode).name
        except ValueError:
            return None, str(-returncode)
    return returncode, None
