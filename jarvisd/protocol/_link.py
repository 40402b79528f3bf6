"""The child side of a frame link: the one way a program started by a host (a daemon
worker, the sandbox runner, the OpenHands runner) talks frames with it.

* :meth:`ChildLink.send` writes one frame, whole, under a lock (the run's threads and
  the event loop all send);
* a reader thread (:meth:`ChildLink.start`) takes the host's frames: an answer to a
  request this side made (same id: ``pong``, ``infer_result``, ``tool_result``,
  ``approval``) goes to whoever waits for it, a ``ping`` is answered with ``pong``, and
  everything else (``start``, ``cancel``) goes to ``on_frame``;
* the host going away (end of stream, a frame that does not parse, a broken pipe) is
  reported once, to ``on_end``; a program whose host is gone cannot answer anyone.

Requests wait in either world: :meth:`call` in the event loop, :meth:`exchange` blocking
the calling thread (the daemon worker's store barrier). Standard library only: it runs
inside the bare python3 sandbox image.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import IO

from ._frames import (
    Approval,
    Frame,
    FrameError,
    FrameReader,
    InferResult,
    Ping,
    Pong,
    ToolResultFrame,
    encode,
)

__all__ = ["ChildLink"]

#: Frames that answer a request of this side (paired by id).
_ANSWERS = (Pong, InferResult, ToolResultFrame, Approval)


class ChildLink:
    """Frames out to the host (one lock) and in from it (one reader thread).

    ``on_frame`` gets every frame that is not an answer nor a ping, on the reader
    thread; returning False stops reading. ``on_end`` gets why reading stopped (None:
    the host closed the stream or ``on_frame`` stopped it; else the error), once.
    ``on_broken`` is called when a write fails (the host is gone); without it the
    error is raised to the sender."""

    def __init__(
        self,
        reader: FrameReader | IO[bytes],
        out: IO[bytes],
        *,
        on_frame: Callable[[Frame], bool | None] | None = None,
        on_end: Callable[[Exception | None], object] | None = None,
        on_broken: Callable[[], object] | None = None,
    ) -> None:
        self.reader = reader if isinstance(reader, FrameReader) else FrameReader(reader)
        self.out = out
        self.on_frame = on_frame
        self.on_end = on_end
        self.on_broken = on_broken
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        #: Requests sent, by id: what takes the host's answer.
        self._waiting: dict[str, Callable[[Frame], object]] = {}

    def send(self, frame: Frame) -> None:
        data = encode(frame)
        with self._write_lock:
            try:
                self.out.write(data)
                self.out.flush()
            except OSError:  # BrokenPipeError included: the host is gone
                if self.on_broken is None:
                    raise
                self.on_broken()

    # -- answers --------------------------------------------------------------------

    def expect(self, frame_id: str, deliver: Callable[[Frame], object]) -> Callable[[], None]:
        """Give the answer to request ``frame_id`` to ``deliver`` (on the reader thread,
        or on whichever thread calls :meth:`resolve`); returns the way to stop waiting."""
        with self._lock:
            self._waiting[frame_id] = deliver

        def forget() -> None:
            with self._lock:
                self._waiting.pop(frame_id, None)

        return forget

    def resolve(self, frame: Frame) -> bool:
        """Hand ``frame`` to whoever waits for its id: False when nobody does (an
        answer to nothing asked, or to a call given up: dropped)."""
        with self._lock:
            deliver = self._waiting.pop(frame.id, None)
        if deliver is None:
            return False
        deliver(frame)
        return True

    def waiter(self, frame_id: str) -> tuple[asyncio.Future[Frame], Callable[[], None]]:
        """A future of the running loop that the answer to ``frame_id`` settles (the
        first answer counts), and the way to stop waiting. Register before sending."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Frame] = loop.create_future()

        def settle(answer: Frame) -> None:
            if not future.done():
                future.set_result(answer)

        return future, self.expect(
            frame_id, lambda answer: loop.call_soon_threadsafe(settle, answer)
        )

    async def call(self, frame: Frame) -> Frame:
        """Send ``frame`` and wait in the event loop for the host's answer (same id)."""
        future, forget = self.waiter(frame.id)
        try:
            self.send(frame)
            return await future
        finally:
            forget()

    def exchange(self, frame: Frame) -> Frame:
        """Send ``frame`` and block this thread until the host answers it. No deadline:
        a stopped host answers once it runs again, and one that went away ends the
        stream, which ends this program (``on_end``)."""
        answered = threading.Event()
        answers: list[Frame] = []

        def deliver(answer: Frame) -> None:
            answers.append(answer)
            answered.set()

        forget = self.expect(frame.id, deliver)
        try:
            self.send(frame)
            answered.wait()
            return answers[0]
        finally:
            forget()

    # -- reading --------------------------------------------------------------------

    def start(self, name: str = "frames-in") -> threading.Thread:
        thread = threading.Thread(target=self.read_forever, name=name, daemon=True)
        thread.start()
        return thread

    def read_forever(self) -> None:
        """Read the host's frames until it stops: see the class docstring."""
        error: Exception | None = None
        try:
            for frame in self.reader:
                if isinstance(frame, _ANSWERS) and self.resolve(frame):
                    continue
                if isinstance(frame, Ping):
                    self.send(Pong(id=frame.id))
                elif self.on_frame is not None and self.on_frame(frame) is False:
                    break
        except (FrameError, OSError) as exc:
            error = exc
        if self.on_end is not None:
            self.on_end(error)
