"""The ray backend's per-task stand-in for the worker, on the daemon's machine: a tiny
process that joins the daemon's pipes to one connection of the long-lived Ray driver
(``_relay``), which runs the task's worker on a node.

Run as ``python -I -S .../_stub.py SOCKET ADDRESS NEEDS LABELS FALLBACK WORKSPACE`` (the
last five are the task relay's arguments, see ``_relay``): a script of the standard library
alone, so it starts in milliseconds (no jarvisd, no Ray to import). It exists so the
daemon keeps a real process per task, with its own pid, exit status and process group,
exactly as for a local worker: ``kill_tree`` of it, ``killpg`` after it, the pid in the
store all mean this task alone, never the driver that every task shares.

The wire to the driver, lines both ways:

* to it: the header (the task's resources and labels, JSON), then, once the driver
  answered, the daemon's frames as they are, then ``END`` when the daemon closed our
  stdin. A connection that ends without
  ``END`` is a stub that was killed: the driver kills the worker on its node.
* from it: ``F`` and a frame for the daemon, or ``X`` and the worker's exit status, last;
  or, first and alone, ``R``: the driver cannot reach the cluster, so this process
  becomes the task's own relay (``exec``, same pid; the daemon's frames still unread in
  its stdin), which waits for the cluster or runs the task here (``[cluster] fallback``).
"""

import os
import socket
import sys
import threading
import time

#: Kept in step with ``jarvisd._procs.EXIT_HOST_GONE`` (tests/cluster check it).
EXIT_HOST_GONE = 75
#: Seconds the driver, just started, has to listen.
CONNECT_S = 30.0
END = b"END\n"
#: A line from the driver at most: its kind's byte, a frame at the frame limit and the
#: newline (kept in step with ``jarvisd.protocol.MAX_FRAME_BYTES``; tests/cluster check).
MAX_FRAME_BYTES = 8 * 1024 * 1024
MAX_LINE = MAX_FRAME_BYTES + 2
RELAY_MODULE = "jarvisd.cluster._relay"


def _error_frame(message: str) -> bytes:
    # The frame jarvisd.protocol.encode(ErrorFrame(...)) writes, spelled out: the stub
    # imports nothing of jarvisd.
    import json

    body = {"kind": "error", "id": os.urandom(8).hex(), "code": "failed", "message": message}
    return b"@@jarvis:1@@ " + json.dumps(body, separators=(",", ":")).encode() + b"\n"


def _connect(path: str) -> socket.socket | None:
    deadline = time.monotonic() + CONNECT_S
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
            return conn
        except OSError:
            conn.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)


def _forward(conn: socket.socket) -> None:
    stdin = sys.stdin.buffer
    try:
        for line in iter(stdin.readline, b""):
            conn.sendall(line)
        conn.sendall(END)
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the driver is gone: the main loop says so


def main(argv: list[str]) -> int:
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    conn = _connect(argv[0])
    if conn is None:
        out.write(_error_frame(f"the Ray driver did not listen at {argv[0]}"))
        return 1
    import json

    header = {"needs": json.loads(argv[2]), "labels": json.loads(argv[3])}
    conn.sendall(json.dumps(header).encode() + b"\n")
    reader = conn.makefile("rb")
    forwarding = False
    for line in iter(lambda: reader.readline(MAX_LINE), b""):
        if len(line) == MAX_LINE and not line.endswith(b"\n"):
            out.write(_error_frame(f"the Ray driver sent a line of more than {MAX_LINE} bytes"))
            return 1
        if line[:1] == b"R" and not forwarding:
            conn.close()
            sys.stderr.flush()
            os.execv(sys.executable, [sys.executable, "-m", RELAY_MODULE, *argv[1:]])
        if not forwarding:  # nothing of stdin is read before: an R leaves it whole
            threading.Thread(target=_forward, args=(conn,), daemon=True).start()
            forwarding = True
        if line[:1] == b"F":
            out.write(line[1:])
        elif line[:1] == b"X":
            return int(line[1:])
    return EXIT_HOST_GONE  # the driver died: the task is settled as an interruption


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except BrokenPipeError:  # the daemon went away
        code = EXIT_HOST_GONE
    sys.stderr.flush()
    os._exit(code)
