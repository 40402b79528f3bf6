"""An agent's file requests (``fs/read_text_file``, ``fs/write_text_file``), confined
to its workspace.

Paths come from the agent and are hostile. Each one is resolved at use time, one
component at a time from a descriptor of the workspace, never following a symlink
(``O_NOFOLLOW``): a link planted anywhere on the way, or swapped in after a check, is
refused rather than followed out of the workspace. Only regular files are read or
written (a FIFO would block, a device would be worse), and sizes are bounded in bytes.

Two more rules keep a sandboxed agent to what it could do itself:

* with ``user`` (the sandbox's uid and gid, when jarvis runs as root) every read and
  write is carried out with that user's permissions (:mod:`._asuser`), not jarvis's;
* writes to paths that configure tools which run commands on the host (``.git/...``,
  ``.envrc``, ``.vscode/...``: :mod:`._protected`) are refused.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from .._errors import ToolError
from ._asuser import call_as
from ._protected import protected_reason

__all__ = ["MAX_READ_BYTES", "MAX_WRITE_BYTES", "Workspace"]

MAX_READ_BYTES = 4 * 1024 * 1024
MAX_WRITE_BYTES = 4 * 1024 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Workspace:
    """The directory an agent works in (absolute; it must exist when used)."""

    def __init__(
        self,
        root: Path,
        *,
        max_read_bytes: int = MAX_READ_BYTES,
        max_write_bytes: int = MAX_WRITE_BYTES,
        user: tuple[int, int] | None = None,
    ) -> None:
        self.root = Path(os.path.abspath(root))
        self.max_read_bytes = max_read_bytes
        self.max_write_bytes = max_write_bytes
        #: (uid, gid) whose permissions reads and writes get; None: jarvis's own.
        self.user = user
        #: Where requests are carried out when not in ``root`` itself: the copy of a
        #: private workspace the agent works on (``_mirror``), so that its requests
        #: and its own tools see and change the same files.
        self.tree: Path | None = None

    def parts(self, path: str) -> list[str]:
        """The components of ``path`` below the root, or ToolError when it is not a
        plain path inside the workspace."""
        if not isinstance(path, str) or not path or "\0" in path:
            raise ToolError("the path is empty or holds a NUL character")
        if not os.path.isabs(path):
            path = os.path.join(self.root, path)
        root = str(self.root).rstrip("/")
        if path != root and not path.startswith(root + "/"):
            raise ToolError(f"{path!r} is outside the workspace {root}")
        parts = [p for p in path[len(root) :].split("/") if p and p != "."]
        if ".." in parts:
            raise ToolError(f"{path!r} goes up with '..': refused")
        return parts

    def _as_agent(self, work: Callable[[int], bytes], limit: int) -> bytes:
        """``work(root descriptor)`` with the agent's permissions (see ``user``)."""
        root_fd = os.open(self.tree or self.root, _DIR_FLAGS)
        try:
            if self.user is None:
                return work(root_fd)
            return call_as(self.user, root_fd, work, limit)
        finally:
            os.close(root_fd)

    @contextlib.contextmanager
    def _parent(
        self, parts: list[str], *, create: bool = False, root_fd: int | None = None
    ) -> Iterator[int]:
        """A descriptor of the directory holding ``parts[-1]``, reached without
        following any symlink (``create``: missing directories are made), from
        ``root_fd`` (None: the root opened afresh)."""
        fd = os.open(self.tree or self.root, _DIR_FLAGS) if root_fd is None else os.dup(root_fd)
        try:
            for name in parts[:-1]:
                try:
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(name, 0o755, dir_fd=fd)
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def read_text(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        """The file's text (from 1-based ``line``, at most ``limit`` lines)."""
        parts = self.parts(path)
        if not parts:
            raise ToolError(f"{path!r} is the workspace itself, not a file")
        limit_bytes = self.max_read_bytes + 1

        def work(root_fd: int) -> bytes:
            try:
                with self._parent(parts, root_fd=root_fd) as parent:
                    fd = os.open(
                        parts[-1],
                        os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                        dir_fd=parent,
                    )
                    with os.fdopen(fd, "rb") as file:
                        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                            raise ToolError(f"{path!r} is not a regular file")
                        return file.read(limit_bytes)
            except OSError as exc:
                raise ToolError(_os_error(path, exc)) from exc

        try:
            data = self._as_agent(work, limit_bytes)
        except OSError as exc:
            raise ToolError(_os_error(path, exc)) from exc
        if len(data) > self.max_read_bytes:
            raise ToolError(
                f"{path!r} is larger than {self.max_read_bytes} bytes: read it in parts"
            )
        text = data.decode("utf-8", "replace")
        if line is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        end = None if limit is None else start + max(limit, 0)
        return "".join(lines[start:end])

    def write_text(self, path: str, content: str) -> None:
        data = content.encode("utf-8")
        if len(data) > self.max_write_bytes:
            raise ToolError(f"refused to write more than {self.max_write_bytes} bytes to {path!r}")
        parts = self.parts(path)
        if not parts:
            raise ToolError(f"{path!r} is the workspace itself, not a file")
        reason = protected_reason(parts)
        if reason is not None:
            raise ToolError(f"refused to write {path!r}: {reason}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

        def work(root_fd: int) -> bytes:
            try:
                with self._parent(parts, create=True, root_fd=root_fd) as parent:
                    fd = os.open(parts[-1], flags, 0o644, dir_fd=parent)
                    with os.fdopen(fd, "wb") as file:
                        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                            raise ToolError(f"{path!r} is not a regular file")
                        file.truncate(0)
                        file.write(data)
            except OSError as exc:
                raise ToolError(_os_error(path, exc)) from exc
            return b""

        try:
            self._as_agent(work, 0)
        except OSError as exc:
            raise ToolError(_os_error(path, exc)) from exc

    def directory(self, path: str | None) -> Path:
        """``path`` (None: the root) as a directory inside the workspace, checked the
        same way (for a terminal's working directory)."""
        if path is None:
            return self.root
        parts = self.parts(path)
        try:
            with self._parent([*parts, "."]):
                pass
        except OSError as exc:
            raise ToolError(_os_error(path, exc)) from exc
        return self.root.joinpath(*parts)


def _os_error(path: str, exc: OSError) -> str:
    import errno

    if exc.errno == errno.ELOOP or exc.errno == errno.ENOTDIR:
        return f"{path!r} passes through a symlink or a non-directory: refused"
    return f"{path!r}: {exc.strerror or exc}"
