"""Recording a workspace's files as a commit, with git never reading the workspace.

``git add`` would read the work tree itself: its ``.gitattributes`` (which the agent
writes) and the filters any config names, run with the workspace as their working
directory. Instead jarvis walks the tree itself (directory descriptors opened with
``O_NOFOLLOW``, every entry looked at with ``lstat``, files read from the descriptor it
opened) and hands git the bytes: one ``git fast-import`` stream per commit, into the
workspace's private bare repository. git stores what it is given and runs nothing.

The work is bounded: a manifest of the base (each file's inode, size, times and blob)
tells which files the agent touched without reading the others, and what it touched is
refused, before anything is read, when one file or all of them together are larger than
``[code] max_file_bytes`` / ``max_change_bytes`` (a sparse file counts at its size).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .._errors import WorkspaceError
from ._git import IDENTITY, Git, argv, safe_environment

__all__ = ["Entry", "Limits", "Recorded", "load_manifest", "read_tree", "record", "save_manifest"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20
_MIB = 1 << 20
#: Directory levels the walk descends (as the copy: deeper ones are not recorded).
_MAX_DEPTH = 256


@dataclass(frozen=True, slots=True)
class Limits:
    """The most one changed file, and all of them together, may hold (bytes)."""

    max_file_bytes: int
    max_change_bytes: int


@dataclass(frozen=True, slots=True)
class Entry:
    """One tree entry: git mode ("100644", "100755", "120000", "160000") and object."""

    mode: str
    sha: str


@dataclass(frozen=True, slots=True)
class _Found:
    """A file or link found by the walk, with what its ``lstat`` said."""

    path: str
    mode: str
    key: tuple[int, ...]  # (ino, size, mtime_ns, ctime_ns)
    size: int


@dataclass(frozen=True, slots=True)
class Recorded:
    commit: str
    manifest: dict[str, list[object]]


def _git_mode(st: os.stat_result) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return "120000"
    if stat.S_ISREG(st.st_mode):
        return "100755" if st.st_mode & 0o100 else "100644"
    return None  # sockets, FIFOs, devices: never part of a change


def _walk(top_fd: int, skip: Callable[[str, bool], bool]) -> Iterator[_Found]:
    """Every file and link below the directory ``top_fd``, without following a link;
    ``skip(path, is_dir)`` prunes. Two descriptors a level at most."""
    stack: list[tuple[int, str, Iterator[str]]] = []
    try:
        top = os.dup(top_fd)
        stack.append((top, "", iter(sorted(os.listdir(top)))))
        while stack:
            fd, rel, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                os.close(fd)
                continue
            path = f"{rel}/{name}" if rel else name
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if skip(path, True) or len(stack) >= _MAX_DEPTH:
                    continue
                try:
                    child = os.open(name, _DIR, dir_fd=fd)
                except OSError:
                    continue
                stack.append((child, path, iter(sorted(os.listdir(child)))))
                continue
            mode = _git_mode(st)
            if mode is None or skip(path, False):
                continue
            key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            yield _Found(path, mode, key, st.st_size)
    finally:
        for fd, _rel, _names in stack:
            os.close(fd)


def read_tree(git: Git, commit: str) -> dict[str, Entry]:
    """Every entry of ``commit``'s tree, by path."""
    out = git.run("ls-tree", "-r", "-z", "--full-tree", commit)
    entries = {}
    for line in out.split(b"\0"):
        if not line:
            continue
        meta, _, raw = line.partition(b"\t")
        mode, _kind, sha = meta.decode().split()
        entries[os.fsdecode(raw)] = Entry(mode, sha)
    return entries


def _quote(path: str) -> bytes:
    """``path`` C-quoted as fast-import reads it (any byte may appear in a name)."""
    out = bytearray(b'"')
    for byte in os.fsencode(path):
        if byte in (0x22, 0x5C):
            out += b"\\" + bytes([byte])
        elif byte < 0x20 or byte == 0x7F:
            out += b"\\%03o" % byte
        else:
            out.append(byte)
    return bytes(out + b'"')


class _Hasher:
    """The object name git gives a blob, computed as its bytes go by."""

    def __init__(self, algorithm: str, size: int) -> None:
        self._h = hashlib.new(algorithm)
        self._h.update(b"blob %d\0" % size)

    def update(self, data: bytes) -> None:
        self._h.update(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _parent(top_fd: int, path: str) -> int:
    """A descriptor on the directory holding ``path``, reached without a symlink."""
    fd = os.dup(top_fd)
    try:
        for name in path.split("/")[:-1]:
            child = os.open(name, _DIR, dir_fd=fd)
            os.close(fd)
            fd = child
    except OSError as exc:
        os.close(fd)
        raise WorkspaceError(f"{path} changed while its change was being recorded") from exc
    return fd


def _read(top_fd: int, found: _Found, sink: Callable[[bytes], None]) -> None:
    """Feed exactly ``found.size`` bytes of the file (or the link's target) to ``sink``;
    WorkspaceError when it is not what the walk saw any more."""
    dir_fd = _parent(top_fd, found.path)
    try:
        _read_in(dir_fd, found, sink)
    except FileNotFoundError as exc:
        raise WorkspaceError(f"{found.path} went away while its change was being recorded") from exc
    finally:
        os.close(dir_fd)


def _read_in(dir_fd: int, found: _Found, sink: Callable[[bytes], None]) -> None:
    name = found.path.rsplit("/", 1)[-1]
    if found.mode == "120000":
        target = os.fsencode(os.readlink(name, dir_fd=dir_fd))
        if len(target) != found.size:
            raise WorkspaceError(f"{found.path} changed while its change was being recorded")
        sink(target)
        return
    fd = os.open(name, _FILE, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_ino != found.key[0]:
            raise WorkspaceError(f"{found.path} changed while its change was being recorded")
        left = found.size
        while left:
            data = os.read(fd, min(_CHUNK, left))
            if not data:
                raise WorkspaceError(f"{found.path} shrank while its change was being recorded")
            sink(data)
            left -= len(data)
    finally:
        os.close(fd)


def _object_name(algorithm: str, top_fd: int, found: _Found) -> str:
    hasher = _Hasher(algorithm, found.size)
    _read(top_fd, found, hasher.update)
    return hasher.hexdigest()


def _mib(n: int) -> str:
    return f"{n / _MIB:.1f} MiB"


def _check_limits(changed: list[_Found], limits: Limits | None) -> None:
    if limits is None:
        return
    total = 0
    for found in changed:
        if found.size > limits.max_file_bytes:
            raise WorkspaceError(
                f"the change was not recorded: {found.path} holds {_mib(found.size)}, more than "
                f"[code] max_file_bytes ({_mib(limits.max_file_bytes)})"
            )
        total += found.size
    if total > limits.max_change_bytes:
        raise WorkspaceError(
            f"the change was not recorded: the {len(changed)} files changed hold "
            f"{_mib(total)}, more than [code] max_change_bytes ({_mib(limits.max_change_bytes)})"
        )


def record(
    git: Git,
    tree: Path,
    *,
    ref: str,
    message: str,
    parent: str | None,
    excluded: Callable[[str, bool], bool],
    algorithm: str,
    manifest: Mapping[str, list[object]] | None = None,
    since_ns: int = 0,
    limits: Limits | None = None,
) -> Recorded:
    """Commit ``tree`` as it is now on ``ref`` (on top of ``parent``), and return the
    commit with the manifest of what was recorded. ``parent`` when nothing changed.

    A path ``excluded(path, is_dir)`` says is not the tree's: its entry (if any) stays
    as in ``parent``. A file whose lstat matches ``manifest`` and whose ctime is before
    ``since_ns`` (when that manifest's walk started: a file changed in the tick it was
    seen is read again) is taken as recorded there, unread."""
    walk_started = time.time_ns()
    old = read_tree(git, parent) if parent else {}
    known = {e.sha for e in old.values()}
    manifest = manifest or {}
    entries = {p: e for p, e in old.items() if excluded(p, False)}
    new_manifest: dict[str, list[object]] = {}
    changed: list[_Found] = []
    top = os.open(tree, _DIR)
    try:
        for found in _walk(top, excluded):
            seen = manifest.get(found.path)
            if (
                seen is not None
                and seen[0] == found.mode
                and seen[2:] == list(found.key)
                and found.key[3] < since_ns
            ):
                entries[found.path] = Entry(found.mode, str(seen[1]))
                new_manifest[found.path] = [found.mode, seen[1], *found.key]
            else:
                changed.append(found)
        _check_limits(changed, limits)
        inline: list[_Found] = []
        for found in changed:
            if found.path not in old:
                inline.append(found)  # new here: read once, named as it is sent
                continue
            # Touched, perhaps to the same bytes: named first, sent only when new.
            sha = _object_name(algorithm, top, found)
            new_manifest[found.path] = [found.mode, sha, *found.key]
            entries[found.path] = Entry(found.mode, sha)
            if sha not in known:
                inline.append(found)
        if parent and not inline and entries == old:
            return Recorded(parent, {"": [walk_started], **new_manifest})
        commit, names = _fast_import(git, top, ref, message, parent, entries, inline, algorithm)
    finally:
        os.close(top)
    for found in inline:
        new_manifest[found.path] = [found.mode, names[found.path], *found.key]
    return Recorded(commit, {"": [walk_started], **new_manifest})


def load_manifest(path: Path) -> tuple[dict[str, list[object]], int]:
    """The manifest saved at ``path`` and when its walk started ({} and 0 if none)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}, 0
    started = data.pop("", [0])[0]
    return data, int(started)


def save_manifest(path: Path, manifest: Mapping[str, list[object]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest))
    os.replace(tmp, path)


def _fast_import(
    git: Git,
    top_fd: int,
    ref: str,
    message: str,
    parent: str | None,
    entries: Mapping[str, Entry],
    inline: list[_Found],
    algorithm: str,
) -> tuple[str, dict[str, str]]:
    """One commit through ``git fast-import``: every entry by name, the new files'
    bytes inline (read through descriptors, named as they go: the names returned)."""
    inline_paths = {f.path for f in inline}
    with (
        tempfile.TemporaryDirectory(prefix="jarvis-git-home-") as home,
        tempfile.TemporaryFile() as errors,
    ):
        proc = subprocess.Popen(
            argv(["fast-import", "--quiet", "--force", "--done"]),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            cwd=git.git_dir,
            env=safe_environment(home, git.env()),
        )
        assert proc.stdin is not None
        names: dict[str, str] = {}
        try:
            names = _stream(
                proc.stdin, top_fd, ref, message, parent, entries, inline, inline_paths, algorithm
            )
            proc.stdin.close()
        except BrokenPipeError:
            pass  # fast-import stopped: its exit status and words say why
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        code = proc.wait()
        if code != 0:
            errors.seek(0)
            said = errors.read().decode("utf-8", "replace").strip()[-400:]
            raise WorkspaceError(f"git fast-import failed: {said or f'exit {code}'}")
    return git.text("rev-parse", "--verify", "-q", f"{ref}^{{commit}}"), names


def _stream(
    out: IO[bytes],
    top_fd: int,
    ref: str,
    message: str,
    parent: str | None,
    entries: Mapping[str, Entry],
    inline: list[_Found],
    inline_paths: set[str],
    algorithm: str,
) -> dict[str, str]:
    text = message.encode()
    name, email = IDENTITY["GIT_COMMITTER_NAME"], IDENTITY["GIT_COMMITTER_EMAIL"]
    ident = f"{name} <{email}> {int(time.time())} +0000".encode()
    out.write(
        b"commit %s\nauthor %s\ncommitter %s\ndata %d\n%s\n"
        % (ref.encode(), ident, ident, len(text), text)
    )
    if parent:
        out.write(b"from %s\n" % parent.encode())
    out.write(b"deleteall\n")
    for path, entry in sorted(entries.items()):
        if path not in inline_paths:
            out.write(b"M %s %s %s\n" % (entry.mode.encode(), entry.sha.encode(), _quote(path)))

    names = {}
    for found in inline:
        out.write(
            b"M %s inline %s\ndata %d\n" % (found.mode.encode(), _quote(found.path), found.size)
        )
        hasher = _Hasher(algorithm, found.size)

        def send(data: bytes, hasher: _Hasher = hasher) -> None:
            hasher.update(data)
            out.write(data)

        _read(top_fd, found, send)
        out.write(b"\n")
        names[found.path] = hasher.hexdigest()
    out.write(b"\ndone\n")
    return names
