"""Inside the sandbox: the container's own 127.0.0.1:PORT forwarded to the run's
inference gateway (a Unix socket bind-mounted from the host), then the external agent.
The same relay (:func:`listen`, :func:`serve`) carries a run's egress: the prelude
(``jarvisd.sandbox._prelude --forward``) serves the egress proxy's socket with it.

External agents speak only TCP, and the sandbox has no network: its loopback is its
own, so listening there reaches nothing on the host; each connection is relayed to the
gateway's socket, which is the one way out. The agent runs as this program's child with
its stdio (the ACP conversation) inherited; this program exits with its status.

    python3 -S -c "from runners.acp_forward import entry; entry()" SOCKET PORT

What to start comes as the first line on stdin, the start frame (one JSON object):
``{"argv": [...], "env": {...}, "files": {...}, "cwd": "..."}``. ``env`` is laid over
the container's own environment; ``files`` (name relative to the agent's HOME, text)
are written under ``env["HOME"]`` before it starts. So the agent's config and the
gateway's token are in no file and in no container setting the engine shows
(``docker inspect``): only in the agent's own process, and the container's command is
the same for every run. The frame is read a byte at a time, so not one byte of the ACP
conversation that follows it is taken from the agent's stdin.

Standard library only; runs as the sandbox user.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading

#: The longest start frame (a launch's config files are a few kilobytes).
MAX_FRAME_BYTES = 1 << 20
#: Its exit code when the start frame is missing or malformed.
BAD_FRAME_EXIT = 2
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


class FrameError(ValueError):
    """The start frame is missing or not what :func:`read_frame` expects."""


def read_frame(fd: int = 0) -> tuple[list[str], dict[str, str], dict[str, str], str]:
    """The start frame from ``fd``: (argv, env, files, cwd)."""
    data = bytearray()
    while not data.endswith(b"\n"):
        if len(data) >= MAX_FRAME_BYTES:
            raise FrameError(f"longer than {MAX_FRAME_BYTES} bytes")
        byte = os.read(fd, 1)
        if not byte:
            raise FrameError("stdin ended before it")
        data += byte
    try:
        frame = json.loads(data)
    except ValueError as exc:
        raise FrameError(f"not JSON ({exc})") from None
    if not isinstance(frame, dict):
        raise FrameError("not an object")
    argv, cwd = frame.get("argv"), frame.get("cwd")
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        raise FrameError("argv must be a non-empty list of strings")
    env, files = _table(frame, "env"), _table(frame, "files")
    if not isinstance(cwd, str) or not cwd:
        raise FrameError("cwd must be a path")
    return argv, env, files, cwd


def _table(frame: dict[object, object], name: str) -> dict[str, str]:
    table = frame.get(name)
    if not isinstance(table, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in table.items()
    ):
        raise FrameError(f"{name} must map strings to strings")
    return table


def write_files(home: str, files: dict[str, str]) -> None:
    """``files`` under ``home``, each name relative and staying inside it."""
    for name, text in files.items():
        parts = name.split("/")
        if name.startswith("/") or ".." in parts or "" in parts:
            raise FrameError(f"file name {name!r} leaves the agent's HOME")
        target = os.path.join(home, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as out:
            out.write(text)


def entry() -> None:
    args = sys.argv[1:]
    if len(args) != 2:
        print("usage: acp_forward SOCKET PORT (the start frame on stdin)", file=sys.stderr)
        sys.exit(2)
    path, port = args[0], int(args[1])
    listener = listen(port)
    threading.Thread(target=serve, args=(listener, path), daemon=True).start()
    try:
        argv, env, files, cwd = read_frame()
        environ = dict(os.environ, **env)
        write_files(environ.get("HOME", "/tmp"), files)
    except (FrameError, OSError) as exc:
        print(f"acp_forward: bad start frame: {exc}", file=sys.stderr)
        sys.exit(BAD_FRAME_EXIT)
    try:
        os.chdir(cwd)
    except OSError as exc:  # one line the host shows, not a traceback
        print(
            f"acp_forward: the sandbox user cannot enter the workspace {cwd}: {exc.strerror}",
            file=sys.stderr,
        )
        sys.exit(126)
    try:
        # Not subprocess: its imports would cost this start more than the spawn does.
        # The agent gets the default SIGPIPE and SIGXFSZ Python's startup replaced.
        agent = os.posix_spawnp(argv[0], argv, environ, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
    except (OSError, ValueError) as exc:  # ValueError: a NUL in argv or env
        reason = getattr(exc, "strerror", None) or exc
        print(f"acp_forward: cannot start {argv[0]}: {reason}", file=sys.stderr)
        sys.exit(127)
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(agent, 0)[1]))
