"""The ray backend's driver: one long-lived process per daemon, connected to the Ray
cluster once, that carries every ray task's frames between its stub (``_stub``, the
daemon's child that stands in for the worker) and a warm :class:`WorkerHost` actor on a
node, both ways and in order.

Run as ``python -m jarvisd.cluster._driver ADDRESS SOCKET``; the daemon starts it at its
first ray task (``_ray.Driver``) and again if it died. It listens on ``SOCKET`` (in a
private directory) at once and connects to Ray meanwhile, so a task's stub never waits
for more than that connection. It leaves when its stdin (a pipe from the daemon) ends:
the daemon died, even by ``kill -9``; the actors it owns die with it, and so do their
workers, which see their stdin close and leave as a local worker does when its daemon
goes away.

For each task (one connection, see ``_stub`` for the lines):

* when the cluster could not be reached, the stub is told to become the task's own
  relay (``_relay``: it waits for the cluster or runs the task here, as ``[cluster]
  fallback`` says), and this driver leaves soon after, so the daemon's next task
  starts one that tries again;
* the task's resources are checked against the live nodes (refused with the reason
  when no node could ever run it);
* an idle actor that holds those resources is taken, or a new one is made (spread over
  the nodes that can take it); after the task it waits for the next one. Idle actors of
  other needs are given up when a new actor cannot be placed, so warm ones never starve
  a task of a node's resources;
* the worker's frames come back in batches through ``read``, and the daemon's go in
  one call at a time, so their order holds; a slow daemon stops the fetching, and then
  the worker at its next write: bounded on every hop;
* the stub's exit status is the worker's, or EXIT_HOST_GONE when the worker's node or
  actor died mid-run (the daemon settles the task as interrupted: resumed from its
  checkpoint, or marked, never run twice past a tool call in flight).

Nothing secret is on a command line or in an actor's constructor: the start frame (the
config, credentials' names) travels in the frame stream, as for a local worker.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import threading
import time
from typing import IO, Any, NoReturn

from jarvisd._procs import EXIT_HOST_GONE
from jarvisd.protocol import ErrorFrame, EventFrame, encode

from ._placement import NodeInfo, unmet
from ._relay import PLACED_EVENT, connect, keep_loopback

log = logging.getLogger("jarvisd.cluster.driver")

#: Seconds one fetch of the worker's frames waits on the node before asking again.
_FETCH_WAIT_S = 1.0
#: Idle actors kept per kind of need (each holds its resources on its node).
MAX_IDLE = 4
#: Seconds a new actor may take to be placed before idle ones are given up for it.
_PLACE_WAIT_S = 2.0
#: Seconds between looks for an idle actor while a new one waits to be placed.
_POLL_S = 0.2
#: Seconds the live nodes' listing is reused.
_NODES_TTL_S = 5.0
#: Seconds a worker whose daemon let go (killed its stub) has to end before it is killed.
_LET_GO_S = 5.0
END = b"END\n"
#: Seconds a driver that could not connect answers the tasks already here, then leaves.
_GIVE_UP_S = 2.0


class _Cluster:
    """The connection, the live nodes, and the warm actors, shared by every task."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.ready = threading.Event()
        self.why = ""  # why the cluster cannot be used, once ``ready``
        self._lock = threading.Lock()
        self._idle: dict[str, list[Any]] = {}
        self._nodes: list[NodeInfo] = []
        self._listed = 0.0

    def connect(self) -> None:
        try:
            import ray  # noqa: F401
        except ImportError:
            self.why = "[cluster] backend = \"ray\" needs Ray: pip install 'jarvisd[cluster]'"
        else:
            self.why = connect(self.address)
        self.ready.set()
        if self.why:  # a Ray driver cannot connect again in the same process
            log.warning("%s: this driver leaves", self.why)
            time.sleep(_GIVE_UP_S)
            _leave(1)

    def unmet(self, wanted: dict[str, float], labels: dict[str, str]) -> str:
        import ray

        with self._lock:
            if time.monotonic() - self._listed > _NODES_TTL_S:
                self._nodes = [NodeInfo.from_ray(n) for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
                self._listed = time.monotonic()
            nodes = self._nodes
        why = unmet(wanted, nodes, labels)
        if why:  # ask again next time: a node may have just joined
            self._listed = 0.0
        return why

    def take(self, wanted: dict[str, float], labels: dict[str, str]) -> tuple[Any, str, bool]:
        """An actor holding ``wanted`` on a node with ``labels``, its worker started:
        (actor, node id, whether the actor was warm: it ran a task before)."""
        import ray

        key = _key(wanted, labels)
        made: Any = None  # a handle: its methods are called .remote()
        started: Any = None
        waited = 0.0
        while True:
            idle = self._idle_one(key)
            if idle is not None:
                if made is not None:  # one came back meanwhile: the new one is not needed
                    with contextlib.suppress(Exception):
                        ray.kill(made)
                    made = None
                try:
                    return idle, str(ray.get(idle.start.remote())), True
                except Exception as exc:  # it died idle (its node did): make another
                    log.info("an idle actor is gone: %s", exc)
                    continue
            if made is None:
                made, waited = self._new(wanted, labels), 0.0
                started = made.start.remote()
            if ray.wait([started], timeout=_POLL_S)[0]:
                return made, str(ray.get(started)), False
            waited += _POLL_S
            if waited >= _PLACE_WAIT_S:
                # Idle actors of other needs may hold the very resources it waits for.
                self._give_up_idle(but=key)

    def _idle_one(self, key: str) -> Any:
        with self._lock:
            idle = self._idle.get(key)
            return idle.pop() if idle else None

    @staticmethod
    def _new(wanted: dict[str, float], labels: dict[str, str]) -> Any:
        from ._host import place_host

        return place_host(wanted, labels)

    def _give_up_idle(self, but: str) -> None:
        import ray

        with self._lock:
            gone = [a for k, actors in self._idle.items() if k != but for a in actors]
            self._idle = {k: v for k, v in self._idle.items() if k == but}
        for actor in gone:
            with contextlib.suppress(Exception):
                ray.kill(actor)

    def give_back(self, key: str, actor: Any) -> None:
        import ray

        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < MAX_IDLE:
                idle.append(actor)
                return
        with contextlib.suppress(Exception):
            ray.kill(actor)


def _key(wanted: dict[str, float], labels: dict[str, str]) -> str:
    """Actors are kept warm per kind of need: the resources they hold, where."""
    return json.dumps([wanted, labels], sort_keys=True)


class _Task:
    """One connection: one task's frames between its stub and its actor."""

    def __init__(self, cluster: _Cluster, conn: socket.socket) -> None:
        self.cluster = cluster
        self.conn = conn
        self.lock = threading.Lock()  # one writer to the stub at a time
        self.ended = threading.Event()  # the worker ended: the stub leaves, no END

    def send(self, kind: bytes, data: bytes) -> None:
        with self.lock:
            self.conn.sendall(kind + data)

    def fail(self, code: str, message: str) -> None:
        log.error("%s", message)
        with contextlib.suppress(OSError):
            self.send(b"F", encode(ErrorFrame(code=code, message=message)))
            self.send(b"X", b"1\n")

    def run(self) -> None:
        reader = self.conn.makefile("rb")
        try:
            header = json.loads(reader.readline())
            wanted, labels = header["needs"], header["labels"]
            self.cluster.ready.wait()
            if self.cluster.why:
                # Its own relay handles an unreachable cluster ([cluster] fallback).
                log.warning("%s: the task goes through a relay of its own", self.cluster.why)
                self.send(b"R", b"\n")
                return
            try:
                why = self.cluster.unmet(wanted, labels)
            except Exception as exc:
                self.fail("failed", f"the Ray cluster did not list its nodes: {exc}")
                return
            if why:
                self.fail("usage", f"{why}: no node can run this task")
                return
            try:
                actor, node, warm = self.cluster.take(wanted, labels)
            except Exception as exc:
                log.error("no actor for the task: %s", exc)
                self.send(b"X", b"%d\n" % EXIT_HOST_GONE)
                return
            kept = False
            try:
                kept = self._relay(reader, actor, {"node": node, "warm": warm})
            finally:
                if kept:
                    self.cluster.give_back(_key(wanted, labels), actor)
                else:  # its worker, if any is left, sees its stdin close with it
                    with contextlib.suppress(Exception):
                        import ray

                        ray.kill(actor)
        except (OSError, ValueError):
            pass  # the stub is gone
        finally:
            with contextlib.suppress(OSError):
                self.conn.close()

    def _relay(self, reader: IO[bytes], actor: Any, placed: dict[str, Any]) -> bool:
        """Carry the task's frames until its worker ends; whether the actor may take
        another task."""
        import ray

        self.send(b"F", encode(EventFrame(type=PLACED_EVENT, data=placed)))
        forward = threading.Thread(
            target=self._forward, args=(reader, actor), name="to-worker", daemon=True
        )
        forward.start()
        try:
            while (lines := ray.get(actor.read.remote(_FETCH_WAIT_S))) is not None:
                if lines:
                    self.send(b"F", b"F".join(lines))  # each line its own ``F``
            code = int(ray.get(actor.wait.remote()))
        except OSError:  # the stub is gone: ``_forward`` lets the worker go
            return False
        except Exception as exc:  # its node or its actor died mid-run
            log.error("the task's worker on the Ray cluster was lost: %s", exc)
            self.send(b"X", b"%d\n" % EXIT_HOST_GONE)
            return False
        self.ended.set()
        self.send(b"X", b"%d\n" % (code if code >= 0 else 128 - code))
        # The actor takes another task only once nothing of this one can reach it.
        forward.join(_LET_GO_S)
        return not forward.is_alive()

    def _forward(self, reader: IO[bytes], actor: Any) -> None:
        """The daemon's frames (start, pong, cancel, approval) to the worker, a call at
        a time so their order holds. ``END``: the daemon closed the stub's stdin, so the
        worker's closes; a connection that ends without it is a stub that was killed
        (the daemon gave up on the task): its worker is ended too."""
        import ray

        try:
            for line in iter(reader.readline, b""):
                if line == END:
                    ray.get(actor.close.remote())
                    return
                ray.get(actor.write.remote(line))
            if self.ended.is_set():
                return
            ray.get(actor.close.remote())
            if not self.ended.wait(_LET_GO_S):
                ray.get(actor.kill.remote())
        except Exception as exc:  # the actor is gone: the reading loop says so
            log.warning("relaying to the worker stopped: %s", exc)


def _leave(code: int) -> NoReturn:
    # No interpreter teardown: threads are blocked reading, and Ray's own shutdown is
    # not needed (the actors die with their owner, this process).
    sys.stderr.flush()
    os._exit(code)


def _watch_daemon(path: str) -> None:
    """The daemon's end of our stdin closes when it dies: leave with it."""
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(4096):
            pass
    with contextlib.suppress(OSError):
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    _leave(0)


def main(argv: list[str]) -> NoReturn:
    os.dup2(2, 1)  # whatever Ray prints goes to stderr
    sys.stdout = sys.stderr
    logging.basicConfig(
        level=os.environ.get("JARVISD_WORKER_LOG", "WARNING"),
        format="%(asctime)s ray-driver[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    address, path = argv[0], argv[1]
    keep_loopback(address)
    cluster = _Cluster(address)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server.bind(path)  # in a directory only the daemon's user can enter
    server.listen(64)
    threading.Thread(target=_watch_daemon, args=(path,), name="daemon-watch", daemon=True).start()
    threading.Thread(target=cluster.connect, name="ray-connect", daemon=True).start()
    while True:
        conn, _ = server.accept()
        task = _Task(cluster, conn)
        threading.Thread(target=task.run, name="task", daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1:])
