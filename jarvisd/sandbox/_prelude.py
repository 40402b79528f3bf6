"""What runs first inside the sandbox, before the program: jarvis's own code (mounted
read-only from the host), so nothing the program controls has run yet.

1. Every mount must be the object the host checked: ``lstat`` of its target gives
   the (st_dev, st_ino) the host recorded. The engine mounts whatever a path leads to
   when the container starts, so a path swapped for a link after the check shows up
   here as another object: the prelude says so on stderr and exits with
   :data:`REFUSED_EXIT`, and the program never starts. When all match it prints
   :data:`READY` (the host waits for that line before it hands the channel over).
2. An ExecRequest's files are copied to a writable /tmp/work, which becomes the
   working directory.
3. With ``--forward SOCKET PORT UID GID`` (a run that allows hosts: ``_egress``), a
   forwarder from the sandbox's own 127.0.0.1:PORT to the egress proxy's SOCKET
   (``runners.acp_forward``) is started, listening before the program starts, in a
   process of its own that is not the program's child (as UID:GID when the prelude
   runs as root), with no stdin or stdout: the program's stdout is its frames.
4. The prelude replaces itself with the program (or says in one line why it cannot,
   and exits 127, as a shell would).

Usage: ``python3 -I -S _prelude.py [--mount TARGET DEV INO]... [--inputs DIR]
[--forward SOCKET PORT UID GID] -- ARGV...``
Standard library only: it runs before anything else can be imported.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys

#: The line the prelude prints once every mount is verified.
READY = b"jarvis-sandbox: mounts verified\n"
#: Its exit code when a mount is not what the host checked.
REFUSED_EXIT = 125
#: How its refusal starts on stderr.
REFUSED = "[sandbox] refused:"


#: Its exit code when the network forwarder cannot start.
NO_FORWARD_EXIT = 126
#: Where jarvis's packages are (``runners`` among them): two levels above this file.
CODE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

Forward = tuple[str, int, int, int]


def parse(
    args: list[str],
) -> tuple[list[tuple[str, int, int]], str, Forward | None, list[str]]:
    mounts: list[tuple[str, int, int]] = []
    inputs = ""
    forward: Forward | None = None
    while args and args[0] != "--":
        if args[0] == "--mount":
            mounts.append((args[1], int(args[2]), int(args[3])))
            args = args[4:]
        elif args[0] == "--inputs":
            inputs, args = args[1], args[2:]
        elif args[0] == "--forward":
            forward = (args[1], int(args[2]), int(args[3]), int(args[4]))
            args = args[5:]
        else:
            raise SystemExit(f"prelude: unknown option {args[0]!r}")
    return mounts, inputs, forward, args[1:]


def start_forwarder(path: str, port: int, uid: int, gid: int) -> None:
    """Listen on 127.0.0.1:``port`` now, and relay from a detached process (a
    grandchild: it is nobody's child but the sandbox's init, which ends it with the
    sandbox, and the program's ``wait`` never sees it)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(16)
    child = os.fork()
    if child == 0:
        try:
            if os.fork() == 0:
                _forward(listener, path, uid, gid)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    listener.close()


def _forward(listener: socket.socket, path: str, uid: int, gid: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # the program's stdout carries its frames: never write there
    if os.getuid() == 0:  # a separated runner's container: not root for this
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    sys.path.insert(0, CODE_ROOT)
    from runners.acp_forward import serve

    serve(listener, path)


def mismatch(target: str, dev: int, ino: int) -> str:
    """Why the mount at ``target`` is not the object (dev, ino), or ""."""
    try:
        info = os.lstat(target)
    except OSError as exc:
        return f"{target} cannot be inspected ({exc.strerror})"
    if (info.st_dev, info.st_ino) != (dev, ino):
        return (
            f"the mount at {target} is not the directory or file the host checked (it "
            "changed between the check and the container start)"
        )
    return ""


def main(args: list[str]) -> None:
    mounts, inputs, forward, argv = parse(args)
    if mounts:
        for target, dev, ino in mounts:
            problem = mismatch(target, dev, ino)
            if problem:
                sys.stderr.write(f"{REFUSED} {problem}\n")
                sys.stderr.flush()
                os._exit(REFUSED_EXIT)
        sys.stdout.buffer.write(READY)
        sys.stdout.flush()
    if forward is not None:
        try:
            start_forwarder(*forward)
        except OSError as exc:
            sys.stderr.write(f"[sandbox] cannot start the network forwarder: {exc}\n")
            sys.stderr.flush()
            os._exit(NO_FORWARD_EXIT)
    if inputs:
        shutil.copytree(inputs, "/tmp/work")
        os.chdir("/tmp/work")
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:  # one line that names the program, not a traceback
        sys.stderr.write(f"[sandbox] cannot run {argv[0]}: {exc.strerror}\n")
        sys.stderr.flush()
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
