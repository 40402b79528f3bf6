"""The code-executor seam: start a program (agents' code, an RLM REPL, the in-container
agent runner) somewhere, and talk to it over its stdin/stdout.

One required method, ``open``, returning a :class:`Channel`. Backends: ``subprocess``
(a host process with rlimits and a timeout: NOT a security boundary) and the sandbox
backends (docker, podman, bwrap). Config ``sandbox.backend`` chooses; ``none`` (the
subprocess backend) must be chosen explicitly and warns on every run.

Frames (``jarvisd.protocol``) travel over a channel with :func:`send_frame` and
:func:`receive_frame`; one-shot programs use :func:`run_to_completion`.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from ..protocol import MAX_FRAME_BYTES, Frame, FrameError, decode_line, encode

__all__ = [
    "MAX_NOISE_LINES",
    "MAX_NOISE_LINE_BYTES",
    "Channel",
    "Clock",
    "CodeExecutor",
    "ExecRequest",
    "ExecResult",
    "receive_frame",
    "run_to_completion",
    "send_frame",
]


#: Non-frame output kept from a program: its last this many lines, each cut to this
#: many bytes (about 400 KiB in all, whatever the program prints).
MAX_NOISE_LINES = 200
MAX_NOISE_LINE_BYTES = 2048


@dataclass(frozen=True, slots=True)
class ExecRequest:
    """Run ``argv``. ``files`` are written into a fresh working directory first
    (relative name -> text). ``mounts`` are host paths, "PATH" or "PATH:rw", checked
    against the mount allowlist by sandboxing backends (ignored by ``subprocess``)."""

    argv: Sequence[str]
    files: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 30.0
    mounts: Sequence[str] = ()
    #: Extra environment for the program. Never put secrets here: send them in a frame.
    env: Mapping[str, str] = field(default_factory=dict)
    #: The program runs code of its own that it must not trust (the in-container agent
    #: runner: model-written code). A container backend then starts it as root inside
    #: the container with only CAP_SETUID and CAP_SETGID, telling it in JARVIS_PRIVSEP
    #: the user to become at once and the second user for that code (its root launcher
    #: parent starts that code: ``executors._privsep``). Start such a program with
    #: ``python3 -I``. Backends that cannot (bwrap, subprocess) ignore it.
    separate_code: bool = False
    #: Paths jarvis itself chose to show the program, (host path, path inside, read
    #: only): an external agent's npm tree, Node.js, its per-run home. Never from the
    #: edge: they bypass the mount allowlist. The container backends and bwrap apply
    #: them (``subprocess`` cannot).
    system_binds: Sequence[tuple[str, str, bool]] = ()
    #: The host path of the run's egress proxy socket (``jarvisd.netpolicy``), or ""
    #: (the default): no network at all. The sandbox keeps no network interface either
    #: way; with a socket, the socket is mounted in and a forwarder on the sandbox's own
    #: loopback relays to it, with the proxy variables pointing there
    #: (``jarvisd.sandbox._egress``). The ``subprocess`` backend cannot apply it.
    proxy_socket: str = ""


@dataclass(frozen=True, slots=True)
class ExecResult:
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    #: "oom", "timeout", "killed", "cancelled", "stalled" (the container engine stopped
    #: answering) or "" (normal exit).
    reason: str = ""
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.reason


class Clock:
    """A program's timeout, which can be held while the program waits on the host (a
    sandboxed agent waiting for its inference): held time does not count, so the
    timeout bounds what the program does itself, however slow the host's model is.

    Held time is credited up to ``max_held`` in all (default ``HELD_FACTOR`` times the
    timeout); past that, waiting counts like running. A program that keeps one request
    in flight while it computes therefore lives at most ``timeout + max_held``.
    Thread-safe: backends may watch it from a thread."""

    #: While the clock is held, how long a watchdog sleeps before it looks again.
    HELD_RECHECK_S: ClassVar[float] = 0.25
    #: Default cap on the held time credited, as a multiple of the timeout.
    HELD_FACTOR: ClassVar[float] = 10.0

    def __init__(self, timeout: float, max_held: float | None = None) -> None:
        self.timeout = timeout
        self.max_held = timeout * self.HELD_FACTOR if max_held is None else max_held
        self._start = time.monotonic()
        self._held = 0
        self._held_since = 0.0
        self._held_total = 0.0
        self._lock = threading.Lock()

    def hold(self) -> None:
        with self._lock:
            if self._held == 0:
                self._held_since = time.monotonic()
            self._held += 1

    def release(self) -> None:
        with self._lock:
            self._held -= 1
            if self._held == 0:
                self._held_total += time.monotonic() - self._held_since

    def remaining(self) -> float | None:
        """Seconds left, or None while held within ``max_held`` (it cannot expire then)."""
        with self._lock:
            now = time.monotonic()
            held = self._held_total + (now - self._held_since if self._held else 0.0)
            if self._held and held < self.max_held:
                return None
            used = now - self._start - min(held, self.max_held)
            return self.timeout - used

    def due_in(self) -> float:
        """How long a watchdog may sleep before it looks again: the time left (<= 0: it
        has run out), or a short while when the clock is held."""
        remaining = self.remaining()
        return self.HELD_RECHECK_S if remaining is None else remaining


class Channel(abc.ABC):
    """A started program. The backend enforces the request's timeout on ``clock``: when
    it runs out, the program is killed, ``readline`` returns ``b""`` and ``wait``
    reports ``timed_out``."""

    clock: Clock
    #: Why the host ended the program ("timeout", "killed", ...): set before it is
    #: killed, so a reader that meets the end of its output can tell; "" until then.
    reason: str = ""
    #: The program's one reaping, once a caller waits (see ``wait``).
    _reaping: asyncio.Future[ExecResult] | None = None

    @contextlib.contextmanager
    def clock_held(self) -> Iterator[None]:
        """While the program waits on the host, its timeout stands still."""
        self.clock.hold()
        try:
            yield
        finally:
            self.clock.release()

    @abc.abstractmethod
    async def write(self, data: bytes) -> None: ...

    @abc.abstractmethod
    async def close_stdin(self) -> None: ...

    @abc.abstractmethod
    async def readline(self, limit: int = MAX_FRAME_BYTES + 1) -> bytes:
        """The next line of stdout (with its newline), or ``b""`` at end of output."""

    @abc.abstractmethod
    async def _reap(self) -> ExecResult:
        """Wait for the program to end and release what it held (called once, by
        :meth:`wait`); ``stdout`` is whatever was not read, ``stderr`` the (bounded)
        tail of its error output."""

    def _reaped(self) -> asyncio.Future[ExecResult]:
        if self._reaping is None:
            self._reaping = asyncio.ensure_future(self._reap())
            self._reaping.add_done_callback(_retrieved)
        return self._reaping

    async def wait(self) -> ExecResult:
        """Wait for the program to end (see ``_reap``). The program is reaped once and
        every caller gets the same result: two waiters (a reader, then a stop) each
        draining the output lost it for one of them, or left one waiting for ever on a
        stream whose end the other had taken. A caller cancelled meanwhile leaves the
        reaping running for the next."""
        return await asyncio.shield(self._reaped())

    @abc.abstractmethod
    async def kill(self, reason: str = "killed") -> None:
        """Stop the program now (idempotent); ``wait`` then reports ``reason``."""

    async def stop(self, reason: str = "killed") -> ExecResult:
        """Kill the program and reap it. A cancel that comes meanwhile is held until the
        program is reaped, then raised: cleanup cut short by a second cancel (a run's
        stop, then its tool call's) left the process, its pipes and its files behind."""
        await self.kill(reason)
        reaping = self._reaped()
        cancel: asyncio.CancelledError | None = None
        while not reaping.done():
            try:
                await asyncio.shield(reaping)
            except asyncio.CancelledError as exc:
                if reaping.cancelled():  # the loop itself is going: nothing to wait for
                    raise
                cancel = exc
        if cancel is not None:
            raise cancel
        return reaping.result()

    async def __aenter__(self) -> Channel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop("closed")


def _retrieved(future: asyncio.Future[ExecResult]) -> None:
    # A reaping whose every waiter was cancelled still ends; its error, if any, is not
    # left for asyncio to report as never retrieved.
    if not future.cancelled():
        future.exception()


class CodeExecutor(abc.ABC):
    name: ClassVar[str] = "executor"
    #: Whether this backend isolates the program from the host (network, files, processes).
    isolated: ClassVar[bool] = False

    @abc.abstractmethod
    async def open(self, request: ExecRequest) -> Channel:
        """Start the program and return its channel."""

    async def prepare(self, request: ExecRequest) -> None:  # noqa: B027 - optional hook
        """Get ready to open ``request`` soon (a container backend may create its
        container ahead: the warm pool). Optional: the default does nothing."""

    async def check(self) -> None:  # noqa: B027 - optional hook
        """Raise ``SandboxUnavailable`` now when no program could be started (no engine,
        no image, no bubblewrap). Optional: the default assumes it can. Code agents call
        it before their first model turn, so a missing sandbox costs no inference."""


async def send_frame(channel: Channel, frame: Frame) -> None:
    await channel.write(encode(frame))


async def receive_frame(
    channel: Channel, noise: list[str] | None = None, max_bytes: int = MAX_FRAME_BYTES
) -> Frame | None:
    """The next frame from the program, or None at end of output. Lines that are not
    frames are kept in ``noise`` (when given: the last MAX_NOISE_LINES, each cut to
    MAX_NOISE_LINE_BYTES) and skipped."""
    while True:
        line = await channel.readline(max_bytes + 1)
        if not line:
            return None
        if len(line) > max_bytes:
            raise FrameError(f"frame exceeds the limit of {max_bytes} bytes")
        frame = decode_line(line, max_bytes)
        if frame is not None:
            return frame
        if noise is not None:
            keep_noise(noise, line)


def keep_noise(noise: list[str], line: bytes) -> None:
    """Add ``line`` to ``noise``, in bounded bytes: the tail is what says why a program
    failed, so the oldest lines go first."""
    text = line[:MAX_NOISE_LINE_BYTES].decode("utf-8", "replace").rstrip("\n")
    if len(line) > MAX_NOISE_LINE_BYTES:
        text += f" [... {len(line) - MAX_NOISE_LINE_BYTES} more bytes]"
    noise.append(text)
    if len(noise) > MAX_NOISE_LINES:
        del noise[: len(noise) - MAX_NOISE_LINES]


async def run_to_completion(
    executor: CodeExecutor, request: ExecRequest, stdin: bytes = b""
) -> ExecResult:
    """Start, feed ``stdin``, collect all stdout, wait: for one-shot programs."""
    channel = await executor.open(request)
    try:
        if stdin:
            await channel.write(stdin)
        await channel.close_stdin()
        lines = []
        while line := await channel.readline():
            lines.append(line)
        result = await channel.wait()
    except BaseException:
        await channel.stop("cancelled")
        raise
    out = b"".join(lines).decode("utf-8", "replace") + result.stdout
    return ExecResult(
        result.exit_code, out, result.stderr, result.timed_out, result.reason, result.duration_s
    )
