"""The task's end on a Ray worker node: a Ray actor (made by ``_relay``) that runs the
task worker as its child process and holds its frames for the relay to fetch.

Its stdout goes into a bounded queue: when the relay falls behind, the queue fills, the
pump blocks, the pipe fills and the worker waits at its next write, so nothing is
dropped and memory stays bounded. The worker knows nothing of Ray. When this actor dies
(its relay, its owner, died; or its node did), the worker's stdin closes and it exits
as it does when a local daemon goes away.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from ._backend import WORKER_MODULE

__all__ = ["WorkerHost"]

#: Frames held for the relay at most (each up to the worker's frame limit).
MAX_HELD = 256
#: Frames the relay takes at most per fetch.
BATCH = 64


class WorkerHost:
    """One task's worker on this node (constructing it starts nothing: ``start``)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._out: queue.Queue[bytes | None] = queue.Queue(MAX_HELD)
        self._ended = False

    def start(self) -> str:
        """Start the worker; return this node's Ray id (``task show``'s ``node``)."""
        import ray

        env = dict(os.environ)
        # The worker must import the same jarvisd as this actor did, whatever the path
        # Ray's worker process was started with.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        threading.Thread(target=self._pump, name="jarvis-worker-out", daemon=True).start()
        return str(ray.get_runtime_context().get_node_id())

    def _pump(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in iter(self._proc.stdout.readline, b""):
            self._out.put(line)
        self._out.put(None)

    def write(self, data: bytes) -> None:
        """Frames from the daemon, in the order the relay sends them."""
        assert self._proc is not None and self._proc.stdin is not None
        with contextlib.suppress(OSError, ValueError):  # the worker ended: nothing to tell
            self._proc.stdin.write(data)
            self._proc.stdin.flush()

    def close(self) -> None:
        """The daemon's end closed: the worker sees its stdin end and leaves."""
        assert self._proc is not None and self._proc.stdin is not None
        with contextlib.suppress(OSError):
            self._proc.stdin.close()

    def read(self, wait: float) -> list[bytes] | None:
        """The worker's next frames, waiting up to ``wait`` s for the first ([]: none
        yet); None once its stdout has ended."""
        if self._ended:
            return None
        try:
            first = self._out.get(timeout=wait)
        except queue.Empty:
            return []
        lines: list[bytes] = []
        item: bytes | None = first
        while item is not None:
            lines.append(item)
            if len(lines) >= BATCH:
                return lines
            try:
                item = self._out.get_nowait()
            except queue.Empty:
                return lines
        self._ended = True
        return lines or None

    def wait(self) -> int:
        """The worker's exit status (after its stdout ended)."""
        assert self._proc is not None
        return self._proc.wait()

    def kill(self) -> None:
        """End the worker's whole process group at once."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self._proc.pid, signal.SIGKILL)
