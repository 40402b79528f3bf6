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
3. The prelude replaces itself with the program (or says in one line why it cannot,
   and exits 127, as a shell would).

Usage: ``python3 -I -S _prelude.py [--mount TARGET DEV INO]... [--inputs DIR] -- ARGV...``
Standard library only: it runs before anything else can be imported.
"""

from __future__ import annotations

import os
import shutil
import sys

#: The line the prelude prints once every mount is verified.
READY = b"jarvis-sandbox: mounts verified\n"
#: Its exit code when a mount is not what the host checked.
REFUSED_EXIT = 125
#: How its refusal starts on stderr.
REFUSED = "[sandbox] refused:"


def parse(args: list[str]) -> tuple[list[tuple[str, int, int]], str, list[str]]:
    mounts: list[tuple[str, int, int]] = []
    inputs = ""
    while args and args[0] != "--":
        if args[0] == "--mount":
            mounts.append((args[1], int(args[2]), int(args[3])))
            args = args[4:]
        elif args[0] == "--inputs":
            inputs, args = args[1], args[2:]
        else:
            raise SystemExit(f"prelude: unknown option {args[0]!r}")
    return mounts, inputs, args[1:]


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
    mounts, inputs, argv = parse(args)
    if mounts:
        for target, dev, ino in mounts:
            problem = mismatch(target, dev, ino)
            if problem:
                sys.stderr.write(f"{REFUSED} {problem}\n")
                sys.stderr.flush()
                os._exit(REFUSED_EXIT)
        sys.stdout.buffer.write(READY)
        sys.stdout.flush()
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
