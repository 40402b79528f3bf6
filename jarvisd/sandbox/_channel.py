"""A started container as a :class:`Channel`: the attach socket's frames read by a
thread into a bounded queue, stdin written to it, a watchdog for the deadline, and the
container's removal (see ``_docker``'s docstring for the engine traps handled here)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import shutil
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._errors import SandboxError, SandboxUnavailable
from ..executors import Channel, Clock, ExecResult
from ..protocol import MAX_FRAME_BYTES
from ._engine import Engine, _no_answer
from ._policy import (
    SandboxPolicy,
)

__all__ = ["PROBE_AFTER_S", "DockerChannel"]

log = logging.getLogger(__name__)

_STDERR_TAIL = 64 * 1024
_REST_LIMIT = 8 * 1024 * 1024
_QUEUE_CHUNKS = 256
#: A container's output silent this long makes the reader ask whether the engine still
#: answers (a ping: cheap, so an idle session may ask every few seconds).
PROBE_AFTER_S = 5.0


def _remove_tree(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


class DockerChannel(Channel):
    """A started container. stdout arrives through a bounded queue (a reader thread
    demultiplexes the attach stream), so a chatty program waits for us rather than
    filling the host's memory."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        api: Any,
        container_id: str,
        sock: Any,
        timeout: float,
        inputs: Path | None,
        policy: SandboxPolicy,
        engine: Engine | None = None,
        stdin_sock: Any = None,
    ) -> None:
        self.loop = loop
        self.engine = engine
        #: Set when the engine stopped answering: readline raises it from then on.
        self.stalled: SandboxUnavailable | None = None
        self.api = api
        self.id = container_id
        self.policy = policy
        self.timeout = timeout
        self.clock = Clock(timeout)
        self.start = time.monotonic()
        self.reason = ""
        self._sock = sock
        self._raw: socket.socket = getattr(sock, "_sock", sock)
        #: The program's stdin when it has an attach stream of its own (a TLS engine:
        #: see ``attach_streams``), else the output's socket, half-closed at its end.
        self._stdin_sock = stdin_sock
        self._stdin: socket.socket = (
            self._raw if stdin_sock is None else getattr(stdin_sock, "_sock", stdin_sock)
        )
        self._inputs = inputs
        #: A host directory of this container's own (its covers), removed with it.
        self.scratch: Path | None = None
        #: What runs once the container is gone (an engine elsewhere: its files come
        #: back, ``_transfer``); given whether the engine stopped answering.
        self.after: Callable[[bool], None] | None = None
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue(_QUEUE_CHUNKS)
        self._buf = bytearray()
        self._eof = False
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self._send_lock = threading.Lock()
        self._kill_lock = threading.Lock()
        self._removed = False
        self._stdin_closed = False
        self._done = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, name="sandbox-read", daemon=True)
        self._watchdog = threading.Thread(target=self._watch, name="sandbox-watch", daemon=True)
        self._reader.start()
        self._watchdog.start()

    # -- threads ---------------------------------------------------------------------

    def _recv_exact(self, n: int) -> bytes | None:
        chunks = []
        while n:
            if not self._readable():
                return None
            data = self._raw.recv(min(n, 1 << 16))
            if not data:
                return None
            chunks.append(data)
            n -= len(data)
        return b"".join(chunks)

    def _read_loop(self) -> None:
        try:
            while True:
                header = self._recv_exact(8)
                if header is None:
                    break
                size = int.from_bytes(header[4:8], "big")
                data = self._recv_exact(size) if size else b""
                if data is None:
                    break
                if header[0] == 2:
                    self._keep_stderr(data)
                elif data and not self._push(data):
                    break
        except OSError:
            pass
        finally:
            self._push(None)

    def _readable(self) -> bool:
        """Wait for output. While none comes, ask every PROBE_AFTER_S whether the engine
        still answers: a stalled engine sends nothing, and the stream has no timeout of
        its own. False: it stopped answering (``stalled`` is set)."""
        if self.engine is None:  # nothing to ask (a channel made by hand)
            return True
        # A TLS engine's stream (tcp:// with certificates): bytes already decrypted
        # are in the SSL object, not on the socket, and select would never see them.
        if isinstance(self._raw, ssl.SSLSocket) and self._raw.pending():
            return True
        while not select.select([self._raw], [], [], PROBE_AFTER_S)[0]:
            if self._removed:
                return True  # the socket is shut: recv says so
            if not self._engine_answers():
                return False
        return True

    def _engine_answers(self) -> bool:
        import docker.errors
        import requests.exceptions

        try:
            self.api.ping()  # bounded by sandbox.engine_timeout (the client's timeout)
            return True
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            self._mark_stalled(exc)
            return False

    def _mark_stalled(self, exc: BaseException) -> None:
        if self.stalled is None:
            self.stalled = (
                self.engine.stalled()
                if self.engine is not None
                else SandboxUnavailable("the container engine stopped answering")
            )
            log.warning("sandbox container %s: %s (%s)", self.id[:12], self.stalled, exc)

    def _push(self, item: bytes | None) -> bool:
        """Hand a chunk to the event loop, waiting while the queue is full. One put
        per chunk, waited on until it lands: a put that has started cannot be taken
        back, so putting again after a timeout would deliver the chunk twice."""
        try:
            future = asyncio.run_coroutine_threadsafe(self._queue.put(item), self.loop)
        except RuntimeError:  # the loop is closed: nobody will read
            return False
        while True:
            try:
                future.result(timeout=1.0)
                return True
            except TimeoutError:
                if self._removed:
                    future.cancel()
                    return False
            except Exception:
                return False

    def _keep_stderr(self, data: bytes) -> None:
        self._stderr.append(data)
        self._stderr_size += len(data)
        while self._stderr_size > _STDERR_TAIL and len(self._stderr) > 1:
            self._stderr_size -= len(self._stderr.popleft())

    def _watch(self) -> None:
        # Sleep until the deadline (or, while the host answers an inference request, a
        # short while), then look again.
        while (delay := self.clock.due_in()) > 0:
            if self._done.wait(delay):
                return
        if not self._done.is_set() and self.stalled is None:
            log.info("sandbox container %s timed out after %.1fs", self.id[:12], self.timeout)
            self._terminate("timeout")

    def _terminate(self, reason: str) -> None:
        import docker.errors

        with self._kill_lock:
            if reason and not self.reason:
                self.reason = reason
            if self._removed:
                return
            self._removed = True
            # Shut the socket first: it unblocks a stuck stdin write and the reader, and
            # a removal with the attach stream open can hang.
            with contextlib.suppress(OSError):
                self._raw.shutdown(socket.SHUT_RDWR)
            if self._stdin is not self._raw:
                with contextlib.suppress(OSError):
                    self._stdin.shutdown(socket.SHUT_RDWR)
            if self.stalled is not None:  # no use waiting for it again
                self._remove_later()
                return
            try:
                self.api.remove_container(self.id, force=True)
            except Exception as exc:
                # (requests' errors are OSErrors too: look at them first)
                if _no_answer(exc):
                    self._mark_stalled(exc)
                    self._remove_later()
                elif not isinstance(exc, docker.errors.DockerException | OSError):
                    raise

    def _remove_later(self) -> None:
        if self.engine is not None:
            self.engine.remove_later(self.id)

    # -- Channel ---------------------------------------------------------------------

    async def write(self, data: bytes) -> None:
        if self.stalled is not None:
            raise SandboxUnavailable(str(self.stalled))
        if self._stdin_closed or self._removed:
            raise SandboxError(
                f"the sandboxed program's stdin is closed ({self.reason or 'ended'})"
            )
        try:
            await asyncio.to_thread(self._send, data)
        except OSError as exc:
            raise SandboxError(
                f"the sandboxed program stopped reading its input ({self.reason or 'exited'})"
            ) from exc

    def _send(self, data: bytes) -> None:
        with self._send_lock:
            self._stdin.sendall(data)

    async def close_stdin(self) -> None:
        if self._stdin_closed:
            return
        self._stdin_closed = True
        with self._send_lock, contextlib.suppress(OSError):
            # A stream of its own ends whole (TLS cannot be half-closed and still be
            # read: Python's SSLSocket.shutdown drops the TLS state).
            self._stdin.shutdown(socket.SHUT_WR if self._stdin is self._raw else socket.SHUT_RDWR)

    async def readline(self, limit: int = MAX_FRAME_BYTES + 1) -> bytes:
        start = 0
        while True:
            idx = self._buf.find(b"\n", start)
            if idx >= 0 and idx < limit:
                line = bytes(self._buf[: idx + 1])
                del self._buf[: idx + 1]
                return line
            if len(self._buf) >= limit or (self._eof and self._buf):
                line = bytes(self._buf[:limit])
                del self._buf[:limit]
                return line
            if self._eof:
                if self.stalled is not None:
                    raise SandboxUnavailable(str(self.stalled))
                return b""
            start = len(self._buf)
            chunk = await self._queue.get()
            if chunk is None:
                self._eof = True
            else:
                self._buf += chunk

    async def _drain(self) -> bytes:
        rest = bytearray(self._buf)
        self._buf.clear()
        while not self._eof:
            chunk = await self._queue.get()
            if chunk is None:
                self._eof = True
            elif len(rest) < _REST_LIMIT:
                rest += chunk
        return bytes(rest[:_REST_LIMIT])

    async def _reap(self) -> ExecResult:
        rest = await self._drain()
        code, oom = await asyncio.to_thread(self._finish)
        reason = self.reason or ("oom" if oom else "")
        stderr = b"".join(self._stderr).decode("utf-8", "replace")
        note = ""
        if self.stalled is not None:
            reason = "stalled"
            note = f"[sandbox] {self.stalled}"
        elif reason == "oom":
            note = (
                f"[sandbox] out of memory: the program exceeded the sandbox memory limit of "
                f"{self.policy.memory_text} (sandbox.memory) and was killed"
            )
        elif reason == "timeout":
            note = f"[sandbox] timed out after {self.timeout:g}s: the container was removed"
        if note:
            stderr += ("\n" if stderr and not stderr.endswith("\n") else "") + note + "\n"
        return ExecResult(
            exit_code=code,
            stdout=rest.decode("utf-8", "replace"),
            stderr=stderr,
            timed_out=reason == "timeout",
            reason=reason,
            duration_s=time.monotonic() - self.start,
        )

    def _finish(self) -> tuple[int, bool]:
        """Exit code and OOM flag; then stop the watchdog and remove the container."""
        import docker.errors
        import requests.exceptions

        code, oom = 137, False
        if not self._removed and self.stalled is None:
            try:
                status = self.api.wait(self.id, timeout=self.timeout + 30)
                code = int(status.get("StatusCode", 137))
                if code == 137:  # SIGKILL: the memory limit, or something else?
                    state = self.api.inspect_container(self.id).get("State") or {}
                    oom = bool(state.get("OOMKilled"))
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                code = 137  # removed under us (timeout or kill)
        self._done.set()
        self._watchdog.join()
        self._terminate("")
        self._reader.join(timeout=5)
        # The SDK keeps the attach request's HTTP response on the socket; closed after
        # the socket, it fails at garbage collection ("I/O operation on closed file").
        for sock, raw in ((self._sock, self._raw), (self._stdin_sock, self._stdin)):
            if sock is None:
                continue
            response = getattr(sock, "_response", None)
            if response is not None:
                with contextlib.suppress(OSError, ValueError):
                    response.close()
            with contextlib.suppress(OSError):
                sock.close()
            with contextlib.suppress(OSError):
                raw.close()
        _remove_tree(self._inputs)
        _remove_tree(self.scratch)
        after, self.after = self.after, None
        if after is not None:
            after(self.stalled is not None)
        return code, oom

    async def kill(self, reason: str = "killed") -> None:
        if self._removed:
            return
        await asyncio.to_thread(self._terminate, reason)
