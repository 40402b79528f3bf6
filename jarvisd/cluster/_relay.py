"""The ray backend's stand-in for the worker: a child process of the daemon that places
the task's worker on a Ray node (a :class:`WorkerHost` actor asking for the task's
resources) and carries its frames both ways, in order.

Run as ``python -m jarvisd.cluster._relay ADDRESS RESOURCES_JSON [LABELS_JSON [FALLBACK
[WORKSPACE]]]`` (FALLBACK: what to do when the cluster cannot be reached, see
``_fallback``; WORKSPACE: a ``jarvis code`` run's workspace id, shipped to the node and
back, see ``_carry``). Nothing secret is on
that command line or in any Ray call's arguments that Ray's dashboard shows: the start
frame (the config, credentials' names) travels in the frame stream, as for a local
worker. The daemon reads this process's exit status as a worker's:

* the worker's own, once it ended;
* EXIT_HOST_GONE when the worker's node or actor died mid-run (the daemon then settles
  the task as interrupted: resumed from its checkpoint, or marked, never run twice
  past a tool call in flight);
* after an error frame saying why, when the cluster cannot be reached or no node of it
  can ever run the task.

When the daemon goes away this process ends; Ray then ends the actor it owns, whose
worker sees its stdin close and leaves.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
from typing import IO, Any, NoReturn

from jarvisd._procs import EXIT_HOST_GONE
from jarvisd.protocol import ErrorFrame, EventFrame, encode

from . import _carry as carry
from ._fallback import run_locally, wait_and_retry
from ._placement import NodeInfo, unmet

log = logging.getLogger("jarvisd.cluster.relay")

#: The event that says where the task runs (``task show``'s ``node``).
PLACED_EVENT = "task_placed"
#: The event that says a jarvis code run's workspace went to the node, and its size.
SHIPPED_EVENT = "workspace_shipped"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: Seconds the cluster has to accept this process as a driver.
CONNECT_TIMEOUT_S = 30.0
#: Seconds a TCP connection to the cluster's address may take before Ray is tried.
_KNOCK_S = 5.0
#: Seconds one fetch of the worker's frames waits on the node before asking again.
_FETCH_WAIT_S = 1.0


def _leave(code: int) -> NoReturn:
    # No interpreter teardown: the stdin thread is blocked reading, and Ray's own
    # shutdown is not needed (the actor dies with its owner, this process).
    sys.stderr.flush()
    os._exit(code)


def _fail(out: IO[bytes], code: str, message: str) -> NoReturn:
    log.error("%s", message)
    out.write(encode(ErrorFrame(code=code, message=message)))
    _leave(1)


def _host_port(address: str) -> tuple[str, str]:
    """``HOST:PORT`` or ``ray://HOST:PORT`` split (an IPv6 host without its brackets);
    ("", "") for an address without a port, such as ``auto``."""
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    return (host.strip("[]"), port) if colon else ("", "")


def keep_loopback(address: str) -> None:
    """Before Ray is imported: connect to a loopback ``address`` on loopback."""
    host, _port = _host_port(address)
    if host in _LOOPBACK:
        # Ray's driver swaps a loopback address for this machine's outward one, where a
        # cluster started on loopback (one machine, a test) does not listen; this flag
        # is the one thing that makes it keep loopback (it means no more than that).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def connect(address: str, timeout: float = CONNECT_TIMEOUT_S) -> str:
    """Connect this process to the cluster; "" or why it could not within ``timeout``
    seconds (Ray itself retries an address nothing answers for minutes)."""
    why = _refused(address, min(timeout, _KNOCK_S))
    if why:
        return why
    import ray

    errors: list[BaseException] = []

    def init() -> None:
        try:
            ray.init(
                address=address,
                namespace="jarvis",
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
        except BaseException as exc:
            errors.append(exc)

    attempt = threading.Thread(target=init, name="ray-connect", daemon=True)
    attempt.start()
    attempt.join(timeout)
    if attempt.is_alive():
        return f"the Ray cluster at {address} did not answer within {timeout:g} s"
    if errors:
        return f"the Ray cluster at {address} cannot be reached: {errors[0]}"
    return ""


def _refused(address: str, timeout: float) -> str:
    """Why nothing can answer at ``address`` ("" when something listens there, or the
    address is ``auto``): a refused TCP connection is known at once, where Ray would
    wait out its whole timeout on it."""
    host, port = _host_port(address)
    if not port.isdigit():
        return ""  # "auto", or an address Ray itself must read
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        return f"the Ray cluster at {address} cannot be reached: {exc.strerror or exc}"
    return ""


def unreachable(address: str, fallback: str) -> str:
    """Why the cluster is not tried now: the daemon found it down moments ago."""
    return f"the Ray cluster at {address} cannot be reached (found so at submit; {fallback})"


def _forward_stdin(actor: Any) -> None:
    """The daemon's frames (start, pong, cancel, approval) to the worker, one at a time
    so their order holds; its end closes the worker's stdin."""
    import ray

    try:
        for line in iter(sys.stdin.buffer.readline, b""):
            ray.get(actor.write.remote(line))
        ray.get(actor.close.remote())
    except Exception as exc:  # the actor is gone: the main loop says so
        log.warning("relaying to the worker stopped: %s", exc)


def main(argv: list[str]) -> NoReturn:
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # whatever Ray prints goes to stderr, never between frames
    sys.stdout = sys.stderr
    logging.basicConfig(
        level=os.environ.get("JARVISD_WORKER_LOG", "WARNING"),
        format="%(asctime)s relay[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    address, wanted = argv[0], json.loads(argv[1])
    labels: dict[str, str] = json.loads(argv[2]) if len(argv) > 2 else {}
    fallback = argv[3] if len(argv) > 3 else ""
    workspace = argv[4] if len(argv) > 4 else ""
    keep_loopback(address)
    # The daemon found the cluster down moments ago: not tried again (nor Ray imported).
    why = unreachable(address, fallback) if fallback.endswith("-now") else ""
    if not why:
        try:
            import ray
        except ImportError:
            _fail(
                out,
                "usage",
                "[cluster] backend = \"ray\" needs Ray: pip install 'jarvisd[cluster]'",
            )
        why = connect(address)
    if why and fallback.startswith("local"):
        run_locally(out, why)
    if why and fallback.startswith("wait"):
        wait_and_retry(out, why, argv)
    if why:
        _fail(out, "failed", why)
    from ._host import place_host

    try:
        nodes = [NodeInfo.from_ray(n) for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    except Exception as exc:
        _fail(out, "failed", f"the Ray cluster at {address} did not list its nodes: {exc}")
    why = unmet(wanted, nodes, labels)
    if why:
        _fail(out, "usage", f"{why}: no node can run this task")
    shipped = None
    if workspace:
        try:
            shipped, what = carry.ship_out(workspace)
        except Exception as exc:  # too big, or the workspace is gone
            _fail(out, "usage", f"the workspace cannot go to a cluster node: {exc}")
    actor: Any = place_host(wanted, labels)
    try:
        node = ray.get(actor.start.remote())
        if shipped is not None:  # there before the worker's start frame is
            try:
                carry.install(node, shipped)
            except Exception as exc:  # the node cannot take it: not a node lost
                _fail(out, "failed", f"the workspace could not be installed on {node}: {exc}")
            out.write(encode(EventFrame(type=SHIPPED_EVENT, data={**what, "node": node})))
        out.write(encode(EventFrame(type=PLACED_EVENT, data={"node": node})))
        threading.Thread(target=_forward_stdin, args=(actor,), daemon=True).start()
        while (lines := ray.get(actor.read.remote(_FETCH_WAIT_S))) is not None:
            if lines:
                out.write(b"".join(lines))
        code = int(ray.get(actor.wait.remote()))
        if shipped is not None:
            try:
                carry.bring_back(node, workspace)
            except Exception as exc:
                log.error("the workspace's change did not come back from the node: %s", exc)
                code = code or 1
    except BrokenPipeError:  # the daemon went away: the actor ends with this process
        _leave(EXIT_HOST_GONE)
    except Exception as exc:  # its node or its actor died mid-run
        log.error("the task's worker on the Ray cluster was lost: %s", exc)
        _leave(EXIT_HOST_GONE)
    _leave(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main(sys.argv[1:])
