"""Inside the sandbox: the container's own 127.0.0.1:PORT forwarded to the run's
inference gateway (a Unix socket bind-mounted from the host), then the external agent.
The same relay (:func:`listen`, :func:`serve`) carries a run's egress: the prelude
(``jarvisd.sandbox._prelude --forward``) serves the egress proxy's socket with it.

External agents speak only TCP, and the sandbox has no network: its loopback is its
own, so listening there reaches nothing on the host; each connection is relayed to the
gateway's socket, which is the one way out. The agent runs as this program's child with
its stdio (the ACP conversation) inherited; this program exits with its status.

    python3 -S -c "from runners.acp_forward import entry; entry()" SOCKET PORT CWD -- ARGV...

Standard library only; runs as the sandbox user.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

#: Connections relayed at once (each costs two threads, and threads count as pids).
MAX_CONNECTIONS = 16
_CHUNK = 65536


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _relay(client: socket.socket, path: str, slots: threading.Semaphore) -> None:
    try:
        with client, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
            try:
                upstream.connect(path)
            except OSError as exc:
                print(f"acp_forward: cannot reach {path}: {exc}", file=sys.stderr)
                return
            back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
            back.start()
            _pump(client, upstream)
            back.join()
    finally:
        slots.release()


def serve(listener: socket.socket, path: str) -> None:
    slots = threading.Semaphore(MAX_CONNECTIONS)
    while True:
        slots.acquire()
        try:
            client, _ = listener.accept()
        except OSError:
            slots.release()
            return
        threading.Thread(target=_relay, args=(client, path, slots), daemon=True).start()


def listen(port: int) -> socket.socket:
    """A listener on the sandbox's own loopback at ``port``."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(MAX_CONNECTIONS)
    return listener


def entry() -> None:
    args = sys.argv[1:]
    if len(args) < 5 or args[3] != "--":
        print("usage: acp_forward SOCKET PORT CWD -- ARGV...", file=sys.stderr)
        sys.exit(2)
    path, port, cwd, argv = args[0], int(args[1]), args[2], args[4:]
    listener = listen(port)
    threading.Thread(target=serve, args=(listener, path), daemon=True).start()
    try:
        os.chdir(cwd)
    except OSError as exc:  # one line the host shows, not a traceback
        print(
            f"acp_forward: the sandbox user cannot enter the workspace {cwd}: {exc.strerror}",
            file=sys.stderr,
        )
        sys.exit(126)
    try:
        agent = subprocess.Popen(argv)
    except OSError as exc:
        print(f"acp_forward: cannot start {argv[0]}: {exc.strerror}", file=sys.stderr)
        sys.exit(127)
    sys.exit(agent.wait())
