"""SIGINT, SIGTERM and SIGHUP during ``jarvis code apply``: noted, never acted on mid-step.

A handler that raised at any bytecode could interrupt a rename or the rollback itself.
So the handlers only note the signal (as uvicorn's do); apply calls ``check()`` between
steps while it can still roll back, and after its commit point it stops checking: the
change is completed and the signal has no further effect. The previous handlers come
back when the guard ends. Off the main thread no handler can be set; there the guard
notes nothing (SIGKILL cannot be caught anyway, which is what the journal is for).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

from .._errors import WorkspaceError

__all__ = ["ApplyInterrupted", "SignalGuard"]

_CAUGHT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class ApplyInterrupted(WorkspaceError):
    """A signal stopped the apply before its commit point; it was rolled back."""

    exit_code = 130


class SignalGuard:
    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in _CAUGHT:
                self._previous[sig] = signal.signal(sig, self._note)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else ""

    def check(self) -> None:
        """ApplyInterrupted when a signal came."""
        if self.received is not None:
            raise ApplyInterrupted(f"interrupted by {self.name}")
