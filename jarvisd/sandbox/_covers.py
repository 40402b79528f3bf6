"""Covers: how the sandbox user reaches a mount that lies below a private directory.

A checked mount is bound at its own host path inside the container. When a directory
above it is private (``/root`` is 0700, on the host and in the image; so is a
``mktemp -d`` directory), the sandbox user, who is not its owner, cannot pass it, and
the mount is unreachable: the prelude cannot even ``lstat`` it. A cover is an empty
directory, mode 0711 and owned by root, made on the host for one container and bound
over the topmost such directory in it: the engine makes the directories on the way to
the mount inside it (root-owned, 0755), so the user can walk to the mount but list or
write nothing of the cover itself, and nothing of the host directory it hides is in
the container. (Not a tmpfs: runc gives a tmpfs the mode of the directory it covers,
0700 for the image's /root.)

Only the directories *above* a mount are covered: a mount that is itself private
keeps its owner and mode (see :func:`unreachable`).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = ["covers", "make_covers", "unreachable"]


def _passable(path: Path, uid: int, gid: int) -> bool:
    """Whether ``uid``/``gid`` may pass through the directory ``path`` (on the host)."""
    try:
        info = os.stat(path)
    except OSError:
        return True  # not on the host: the engine makes it, 0755
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == gid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def covers(targets: Iterable[str], uid: int, gid: int, keep: Iterable[str] = ()) -> list[str]:
    """The directories to cover so that ``uid`` reaches every one of ``targets`` (host
    paths, mounted at the same path): for each, the topmost of its ancestors it cannot
    pass. ``keep``: directories the container has of its own (its ``/tmp`` tmpfs):
    what lies below them is made there, passable, and never covered."""
    kept = {Path(k) for k in keep}
    chosen: list[Path] = []
    for target in targets:
        path = Path(target)
        for ancestor in reversed(path.parents):  # from / down
            if ancestor == Path("/"):
                continue
            if any(ancestor.is_relative_to(k) for k in kept):
                break  # the container's own (a fresh tmpfs): the engine makes it, 0755
            if any(ancestor.is_relative_to(c) for c in chosen):
                break  # already inside a cover: everything below it is made passable
            if not _passable(ancestor, uid, gid):
                chosen.append(ancestor)
                break
    return sorted(str(c) for c in chosen)


def make_covers(paths: Iterable[str]) -> tuple[Path | None, list[tuple[str, str, bool]]]:
    """One host directory holding an empty 0711 directory per cover path, and the
    binds (source, target, read_only) that put them over ``paths``; (None, []) when
    there are none. The caller removes the directory once the container is gone."""
    targets = list(paths)
    if not targets:
        return None, []
    root = Path(tempfile.mkdtemp(prefix="jarvis-cover-"))
    binds = []
    try:
        for i, target in enumerate(targets):
            cover = root / str(i)
            cover.mkdir()
            os.chmod(cover, 0o711)  # whatever the umask
            # Read-write for the engine, which makes the mount points in it; the
            # sandbox user, not its owner, can write nothing there.
            binds.append((str(cover), target, False))
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root, binds


def unreachable(path: Path, uid: int, gid: int) -> str:
    """Why ``uid`` cannot use the directory ``path`` itself (read and pass), or ""."""
    try:
        info = os.stat(path)
    except OSError as exc:
        return f"{path} cannot be inspected ({exc.strerror})"
    need = stat.S_IRUSR | stat.S_IXUSR
    if info.st_uid == uid:
        bits = info.st_mode & need
    elif info.st_gid == gid:
        bits = (info.st_mode << 3) & need
    else:
        bits = (info.st_mode << 6) & need
    if bits == need:
        return ""
    return (
        f"{path} is private (mode {stat.S_IMODE(info.st_mode):04o}, owner uid "
        f"{info.st_uid}) and the sandbox user (uid {uid}) cannot enter it"
    )
