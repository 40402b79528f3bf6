"""The task's end on a Ray worker node: a Ray actor (made by ``_relay``, the driver) that
runs a task worker as its child process and holds its frames for the driver to fetch.
One actor runs one task at a time and then the next (``start`` again): the driver keeps
them warm, so a task's dispatch is a remote call plus the worker's own start, not a new
Python process on the node that imports Ray.

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
from typing import Any

from jarvisd.protocol import MAX_FRAME_BYTES, ErrorFrame, encode

from ._backend import WORKER_MODULE

__all__ = ["WorkerHost", "place_host"]

#: Frames held for the relay at most (each up to the worker's frame limit).
MAX_HELD = 256
#: Frames the relay takes at most per fetch.
BATCH = 64
#: A line of the worker's at most: a frame at the frame limit, with its newline. The
#: daemon refuses a longer frame anyway; reading one whole first would hold it here.
MAX_LINE = MAX_FRAME_BYTES + 1


class WorkerHost:
    """One task's worker on this node (constructing it starts nothing: ``start``)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._out: queue.Queue[bytes | None] = queue.Queue(MAX_HELD)
        self._ended = False

    def node(self) -> str:
        """This node's Ray id; the first call also says the actor is up."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def start(self) -> str:
        """Start a worker (the previous one has ended); return this node's Ray id
        (``task show``'s ``node``)."""
        if self._proc is not None and self._proc.poll() is None:
            raise RuntimeError("this host's worker is still running")
        self._out = queue.Queue(MAX_HELD)
        self._ended = False
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
        proc, out = self._proc, self._out
        threading.Thread(
            target=self._pump, args=(proc, out), name="jarvis-worker-out", daemon=True
        ).start()
        return self.node()

    @staticmethod
    def _pump(proc: subprocess.Popen[bytes], out: queue.Queue[bytes | None]) -> None:
        # Its own worker and queue: a late line of one task never lands in the next's.
        assert proc.stdout is not None
        stdout = proc.stdout
        for line in iter(lambda: stdout.readline(MAX_LINE), b""):
            if len(line) == MAX_LINE and not line.endswith(b"\n"):
                proc.kill()
                why = f"the task's worker wrote a line of more than {MAX_FRAME_BYTES} bytes"
                out.put(encode(ErrorFrame(code="protocol", message=why)))
                break
            out.put(line)
        out.put(None)

    def write(self, data: bytes) -> None:
        """Frames from the daemon, in the order the driver sends them."""
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
        out = self._out
        try:
            first = out.get(timeout=wait)
        except queue.Empty:
            return []
        lines: list[bytes] = []
        item: bytes | None = first
        while item is not None:
            lines.append(item)
            if len(lines) >= BATCH:
                return lines
            try:
                item = out.get_nowait()
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


def place_host(wanted: dict[str, float], labels: dict[str, str]) -> Any:
    """A new :class:`WorkerHost` actor on a node that has ``wanted`` (resources) and
    ``labels`` (``[cluster] require``, ``--node-label``): a handle, its methods called
    ``.remote()``."""
    import ray

    selector: dict[str, Any] = {"label_selector": labels} if labels else {}
    return (
        ray.remote(WorkerHost)
        .options(
            **selector,
            num_cpus=0,
            resources=wanted,
            # Tasks spread over the nodes that can take them (Ray would fill one first).
            scheduling_strategy="SPREAD",
            max_concurrency=4,  # a fetch waits while the daemon's frames go in
            max_restarts=0,  # a worker lost is the daemon's to settle, never re-run here
        )
        .remote()
    )
