"""Mount security: which host paths a sandbox may see, and how.

A requested mount ("PATH" or "PATH:rw") becomes a :class:`Mount` only if every check
passes; otherwise :class:`MountRefused` says which check failed and why:

1. The text has no ``,`` or control character, and the path no ``:`` (they would
   change the meaning of an engine's mount spec), and the path exists.
2. Symlinks are resolved first; the checks below apply to the resolved path (and the
   blocked-name check to the path as written as well).
3. No component of the path matches a blocked pattern (``.ssh``, ``*.pem``,
   ``token*``...; case-insensitive globs; multi-component patterns such as
   ``.config/gcloud`` match consecutive components). A source file whose name matches
   only a name pattern (``token.py``) is judged by its first bytes instead: refused
   when they look like a key (``jarvisd._blocked``).
4. The path does not CONTAIN anything sensitive: it is not ``/``, a home directory,
   an ancestor of one, or a system directory (``/etc``, ``/proc``, ``/run``...), and a
   bounded walk of the tree finds no blocked name. A tree too large to walk completely
   is refused: mount a narrower directory.
5. The path lies inside an allowed root (config ``sandbox.allowed_roots``, entries
   "PATH" or "PATH:rw"); read-write only if that root says ``:rw``.
6. The path would not shadow the sandbox's own system directories inside the
   container (it is mounted at the same path it has on the host).

7. The path is reached again from ``/`` one component at a time without following
   any symlink (``O_PATH|O_NOFOLLOW``): what is checked is the object at the resolved
   path, and its identity (st_dev, st_ino) is recorded in the :class:`Mount`.
8. Every entry of a directory's tree is ``lstat``-ed, through descriptors that follow
   no symlink: sockets, FIFOs and device nodes are refused (a sandbox could talk to a
   host process through them, or reach a device), as are names that are blocked.

A checked mount is only as good as its use: the engine resolves path *strings* itself,
so a path swapped for a symlink between the check and the engine's bind would mount
whatever the link points at. :func:`pin` reopens a checked mount the same way and
refuses it unless it is still the very object that was checked; docker as root hands
the engine a private bind of that descriptor (``_staging``), and both backends check
the identity again inside the sandbox before the program runs (``_prelude``).

What this cannot see: a hard link to a secret under an innocent name (links are
files); entries added to an allowed tree after the check.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

from .._blocked import CONTENT_BYTES, blocked_component, excusable, looks_like_key
from .._errors import MountRefused

__all__ = [
    "BLOCKED_PATTERNS",
    "AllowedRoot",
    "Mount",
    "MountPolicy",
    "parse_mount_request",
    "pin",
]

#: Globs matched (case-insensitively) against every path component. Patterns with a
#: "/" match that many consecutive components.
BLOCKED_PATTERNS: tuple[str, ...] = (
    # key material and credential stores
    ".ssh", ".gnupg", ".gpg", ".aws", ".azure", ".config/gcloud", ".kube", ".docker",
    ".netrc", ".pgpass", ".my.cnf", ".npmrc", ".pypirc", ".gem/credentials", ".cargo/credentials*",
    ".password-store", ".local/share/keyrings", "keyrings", ".vault-token", ".terraform.d",
    ".oci", ".mozilla", ".config/google-chrome", ".config/chromium", ".config/gh",
    ".git-credentials", ".htpasswd", "shadow", "gshadow", "*.kdbx", "*.keychain*",
    # environment files: .env, .env.local, prod.env, my.env.d ...
    ".env*", "*.env", "*.env.*",
    # keys and certificates
    "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.ovpn", "*.asc",
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "*.ppk",
    # names that say what they hold
    "*credential*", "token*", ".token*", "*_token*", "*-token*", "*secret*", "*password*",
    "*passwd*",
    # shell and tool histories often hold pasted secrets
    ".*_history", ".*history",
    # sockets: a mounted docker.sock is root on the host
    "*.sock", "*.socket",
)  # fmt: skip

#: Directories whose contents are host state, never data to hand to an agent: a mount
#: equal to, under, or containing one of these is refused.
SYSTEM_DIRS: tuple[str, ...] = (
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/var/run",
    "/boot",
    "/var/lib/docker",
    "/var/lib/containers",
    "/var/lib/containerd",
    "/var/log",
    "/var/spool",
    "/var/mail",
    "/var/backups",
    "/lost+found",
)

#: Paths inside the container that a host mount must not cover (it is mounted at its
#: host path): the image's own system and jarvis's code and inputs (nor anything under
#: them), and a few directories it may only go inside of.
RESERVED_TARGETS: tuple[str, ...] = (
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/usr",
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/opt/jarvis",
    "/opt/jarvis-in",
)
RESERVED_EXACT: tuple[str, ...] = ("/", "/tmp", "/var", "/opt", "/run", "/home", "/mnt", "/srv")

#: Entries a mount's tree may hold before it counts as too large to verify.
MAX_SCAN_ENTRIES = 20_000
#: Directory levels below a mount the scan descends before the tree counts as too deep.
MAX_SCAN_DEPTH = 128

#: Linux's O_PATH: a descriptor that names an object without opening it for I/O.
_O_PATH = getattr(os, "O_PATH", os.O_RDONLY)


@dataclass(frozen=True, slots=True)
class AllowedRoot:
    path: Path
    writable: bool = False

    def __str__(self) -> str:
        return f"{self.path}:rw" if self.writable else str(self.path)


@dataclass(frozen=True, slots=True)
class Mount:
    """A checked mount: host ``source`` (symlinks resolved) at ``target`` inside.
    ``identity`` is (st_dev, st_ino) of what was checked: the engine must mount exactly
    that object, whatever the path leads to by then."""

    source: Path
    target: str
    read_only: bool = True
    identity: tuple[int, int] = (0, 0)

    def __str__(self) -> str:
        return f"{self.source}{'' if self.read_only else ':rw'}"


def parse_mount_request(text: str) -> tuple[str, bool]:
    """Split "PATH", "PATH:ro" or "PATH:rw" into (path, wants_rw), refusing characters
    that would change the meaning of an engine's mount spec."""
    if not isinstance(text, str) or not text.strip():
        raise MountRefused("empty mount path")
    _refuse_bad_chars(text, text)
    path, wants_rw = text, False
    if text.endswith(":rw"):
        path, wants_rw = text[:-3], True
    elif text.endswith(":ro"):
        path = text[:-3]
    if ":" in path:
        raise MountRefused(f"mount path {path!r} contains ':' (refused: ambiguous in mount specs)")
    if not path:
        raise MountRefused(f"mount {text!r} names no path")
    return path, wants_rw


def _refuse_bad_chars(path: str, shown: str) -> None:
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise MountRefused(f"mount path {shown!r} contains a control character")
    if "," in path:
        raise MountRefused(f"mount path {shown!r} contains ',' (refused: ambiguous in mount specs)")


def _is_within(path: Path, parent: Path) -> bool:
    return path == parent or path.is_relative_to(parent)


def home_directories() -> list[Path]:
    """$HOME, the current user's home, and the homes of root and of every login user."""
    homes: set[Path] = set()
    for text in (os.environ.get("HOME"), os.path.expanduser("~")):
        if text and text != "/":
            homes.add(Path(text))
    try:
        entries = pwd.getpwall()
    except OSError:  # pragma: no cover - no passwd database
        entries = []
    for entry in entries:
        if (entry.pw_uid == 0 or entry.pw_uid >= 1000) and entry.pw_dir not in ("", "/"):
            if entry.pw_dir.startswith("/nonexistent"):
                continue
            homes.add(Path(entry.pw_dir))
    resolved = set()
    for home in homes:
        resolved.add(home)
        try:
            resolved.add(Path(os.path.realpath(home)))
        except OSError:  # pragma: no cover
            pass
    return sorted(resolved)


class MountPolicy:
    """Checks mount requests against allowed roots and blocked patterns.

    Cheap to construct; :meth:`check` does the filesystem work. ``extra_sensitive``
    adds paths a mount may not equal, lie under or contain (e.g. the engine socket).
    """

    def __init__(
        self,
        allowed_roots: Iterable[str],
        *,
        blocked: Sequence[str] = BLOCKED_PATTERNS,
        extra_sensitive: Iterable[str | Path] = (),
        max_scan_entries: int = MAX_SCAN_ENTRIES,
    ) -> None:
        self.allowed_root_specs = tuple(allowed_roots)
        self.blocked = tuple(blocked)
        self.extra_sensitive = tuple(Path(p) for p in extra_sensitive)
        self.max_scan_entries = max_scan_entries

    # -- allowed roots ---------------------------------------------------------------

    def allowed_roots(self) -> list[AllowedRoot]:
        """The configured roots, resolved. Roots that do not exist are skipped: they
        cannot hold anything to mount."""
        roots = []
        for spec in self.allowed_root_specs:
            try:
                path, writable = parse_mount_request(spec)
            except MountRefused as exc:
                raise MountRefused(f"sandbox.allowed_roots entry {spec!r}: {exc}") from None
            expanded = Path(path).expanduser()
            if not expanded.is_absolute():
                raise MountRefused(f"sandbox.allowed_roots entry {spec!r} must be absolute")
            if expanded.exists():
                roots.append(AllowedRoot(Path(os.path.realpath(expanded)), writable))
        return roots

    # -- the check -------------------------------------------------------------------

    def check_all(self, requests: Iterable[str]) -> list[Mount]:
        mounts: list[Mount] = []
        for request in requests:
            mount = self.check(request)
            if any(m.source == mount.source for m in mounts):
                raise MountRefused(f"{mount.source} is requested more than once")
            mounts.append(mount)
        return mounts

    def check(self, request: str) -> Mount:
        """The mount ``request`` ("PATH" or "PATH:rw") may become, or MountRefused."""
        text, wants_rw = parse_mount_request(request)
        written = Path(os.path.abspath(os.path.expanduser(text)))
        try:
            info = os.lstat(written)
        except FileNotFoundError:
            raise MountRefused(f"{written} does not exist") from None
        except OSError as exc:
            raise MountRefused(f"{written} cannot be inspected: {exc.strerror}") from exc
        del info
        pattern = blocked_component(written.parts, self.blocked)
        if pattern is not None and not excusable(written.parts, self.blocked):
            raise MountRefused(f"{written} is blocked: it matches {pattern!r}")
        try:
            real = Path(os.path.realpath(written, strict=True))
        except OSError as exc:
            raise MountRefused(f"{written} cannot be resolved: {exc.strerror}") from exc
        shown = str(written) if real == written else f"{written} (-> {real})"
        _refuse_bad_chars(str(real), shown)
        if ":" in str(real):
            raise MountRefused(f"{shown} contains ':' (refused: ambiguous in mount specs)")
        named = blocked_component(real.parts, self.blocked)
        if named is not None and not excusable(real.parts, self.blocked):
            raise MountRefused(f"{shown} is blocked: it matches {named!r}")
        pattern = named or pattern  # a source file so named: judged once opened
        # From here on, the object itself: reached without following any symlink, so a
        # path swapped since realpath() is refused rather than followed.
        with _opened(real, shown) as fd:
            info = os.fstat(fd)
            if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
                raise MountRefused(f"{shown} is neither a regular file nor a directory")
            if pattern is not None:  # a source file so named: its contents decide
                _refuse_key(fd, None, pattern, shown, info.st_mode)
            self._refuse_sensitive(real, shown)
            root = self._allowed_root(real, shown)
            if wants_rw and not root.writable:
                raise MountRefused(
                    f"{shown} cannot be mounted read-write: allowed root {root.path} is "
                    f'read-only (write it as "{root.path}:rw" in sandbox.allowed_roots to '
                    "allow writes)"
                )
            for reserved in RESERVED_TARGETS:
                if _is_within(real, Path(reserved)):
                    raise MountRefused(f"{shown} would cover the sandbox's own {reserved}")
            if str(real) in RESERVED_EXACT:
                raise MountRefused(f"{shown} is refused: mount a directory inside it")
            if stat.S_ISDIR(info.st_mode):
                self._scan(fd, real, shown)
        return Mount(real, str(real), read_only=not wants_rw, identity=_identity(info))

    def _refuse_sensitive(self, real: Path, shown: str) -> None:
        if real == Path("/"):
            raise MountRefused("/ is refused: it contains the whole host, secrets included")
        for home in home_directories():
            if _is_within(home, real):
                raise MountRefused(
                    f"{shown} is refused: it contains the home directory {home} "
                    "(mount a project directory inside it instead)"
                )
        for text in (*SYSTEM_DIRS, *map(str, self.extra_sensitive)):
            system = Path(text)
            if _is_within(real, system) or _is_within(system, real):
                raise MountRefused(f"{shown} is refused: it is or contains host state ({system})")

    def _allowed_root(self, real: Path, shown: str) -> AllowedRoot:
        roots = self.allowed_roots()
        if not self.allowed_root_specs:
            raise MountRefused(
                f"{shown} is not allowed: no sandbox.allowed_roots are configured "
                '(add the directory, or "DIR:rw" for writes, to sandbox.allowed_roots)'
            )
        matching = [r for r in roots if _is_within(real, r.path)]
        if not matching:
            listed = ", ".join(str(r) for r in roots) or "none that exist"
            raise MountRefused(f"{shown} is outside the allowed roots ({listed})")
        # The most specific root decides read-write.
        return max(matching, key=lambda r: len(r.path.parts))

    def _scan(self, fd: int, real: Path, shown: str) -> None:
        """``lstat`` every entry of the tree below the directory ``fd``, descending
        through descriptors opened with ``O_NOFOLLOW`` (a directory swapped for a link
        during the scan is not followed out of the tree). Refuses blocked names, and
        sockets, FIFOs and device nodes: through those a sandbox could talk to a host
        process or reach a device, whatever their name."""
        seen = 0

        def subdirectories(dir_fd: int, rel: PurePath) -> list[str]:
            nonlocal seen
            try:
                with os.scandir(dir_fd) as listing:
                    entries = list(listing)
            except OSError as exc:
                raise MountRefused(
                    f"{shown} cannot be verified: {real / rel} is unreadable ({exc.strerror})"
                ) from exc
            found = []
            for entry in entries:
                seen += 1
                if seen > self.max_scan_entries:
                    raise MountRefused(
                        f"{shown} holds more than {self.max_scan_entries} entries: too large to "
                        "verify that it contains no secrets (mount a narrower directory)"
                    )
                if self._entry_is_dir(dir_fd, entry, rel / entry.name, real, shown):
                    found.append(entry.name)
            return found

        top = os.open(".", _DIR_NOFOLLOW, dir_fd=fd)
        # One (descriptor, path below the mount, subdirectories left) per level.
        stack: list[tuple[int, PurePath, Iterator[str]]] = []
        try:
            stack.append((top, PurePath(), iter(subdirectories(top, PurePath()))))
            while stack:
                dir_fd, rel, pending = stack[-1]
                name = next(pending, None)
                if name is None:
                    os.close(stack.pop()[0])
                    continue
                if len(stack) >= MAX_SCAN_DEPTH:
                    raise MountRefused(
                        f"{shown} is nested more than {MAX_SCAN_DEPTH} directories deep: too "
                        "deep to verify that it contains no secrets (mount a narrower directory)"
                    )
                try:
                    child = os.open(name, _DIR_NOFOLLOW, dir_fd=dir_fd)
                except OSError as exc:
                    raise MountRefused(
                        f"{shown} cannot be verified: {real / rel / name} is unreadable or "
                        f"changed during the check ({exc.strerror})"
                    ) from exc
                stack.append((child, rel / name, iter(())))  # closed by finally if unreadable
                stack[-1] = (child, rel / name, iter(subdirectories(child, rel / name)))
        finally:
            for dir_fd, _rel, _pending in stack:
                os.close(dir_fd)

    def _entry_is_dir(
        self, dir_fd: int, entry: os.DirEntry[str], path: PurePath, real: Path, shown: str
    ) -> bool:
        """Refuse ``entry`` (at ``path`` below the mount) if its name is blocked or it
        is a socket, FIFO or device node; whether it is a directory to descend into."""
        pattern = blocked_component(path.parts, self.blocked)
        if pattern is not None and not excusable(path.parts, self.blocked):
            raise MountRefused(
                f"{shown} is refused: it contains {real / path}, which matches {pattern!r}"
            )
        try:
            mode = entry.stat(follow_symlinks=False).st_mode  # fstatat: an lstat
        except FileNotFoundError:
            return False  # gone since the listing
        except OSError as exc:
            raise MountRefused(
                f"{shown} cannot be verified: {real / path} ({exc.strerror})"
            ) from exc
        if pattern is not None:  # a source file so named: its contents decide
            _refuse_key(dir_fd, entry.name, pattern, f"{shown} is refused: {real / path}", mode)
        kind = _special_kind(mode)
        if kind:
            raise MountRefused(
                f"{shown} is refused: it contains the {kind} {real / path} (through it "
                "a sandbox could reach a host process or device)"
            )
        return stat.S_ISDIR(mode)


def _refuse_key(dir_fd: int, name: str | None, pattern: str, shown: str, mode: int) -> None:
    """Refuse a file whose name matches the name pattern ``pattern`` unless it is a
    regular file whose first bytes do not look like a key (``jarvisd._blocked``):
    ``name`` in the directory ``dir_fd``, or ``dir_fd`` itself (an O_PATH descriptor)
    when ``name`` is None. Opened without following a symlink, without blocking."""
    blocked = f"{shown} matches {pattern!r}"
    if not stat.S_ISREG(mode):
        raise MountRefused(f"{blocked} and is not a regular file")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        if name is None:  # reopens the very object the O_PATH descriptor names
            fd = os.open(f"/proc/self/fd/{dir_fd}", flags & ~os.O_NOFOLLOW)
        else:
            fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        raise MountRefused(f"{blocked} and cannot be read to check it ({exc.strerror})") from exc
    try:
        data = os.read(fd, CONTENT_BYTES)
    except OSError as exc:
        raise MountRefused(f"{blocked} and cannot be read to check it ({exc.strerror})") from exc
    finally:
        os.close(fd)
    why = looks_like_key(data)
    if why:
        raise MountRefused(f"{blocked}: {why}")


_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _special_kind(mode: int) -> str:
    """What a tree entry is when it is not a file, directory or symlink ("" when it is
    one of those: symlinks inside a mount resolve inside the sandbox)."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
        return ""
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return "special file"


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def _open_nofollow(path: Path, shown: str) -> int:
    """An ``O_PATH`` descriptor on ``path`` (absolute), reached from ``/`` one component
    at a time without following any symlink: a link anywhere on the way is refused."""
    fd = os.open("/", _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        names = path.parts[1:]
        for i, name in enumerate(names):
            flags = _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
            if i < len(names) - 1:
                flags |= os.O_DIRECTORY  # a symlink in the middle: ENOTDIR
            try:
                child = os.open(name, flags, dir_fd=fd)
            except OSError as exc:
                raise MountRefused(
                    f"{shown} changed while it was checked: {'/'.join(('', *names[: i + 1]))} "
                    f"is no longer a directory reachable without following a link "
                    f"({exc.strerror})"
                ) from exc
            os.close(fd)
            fd = child
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise MountRefused(f"{shown} changed while it was checked: it is now a symlink")
        # Reached through the right names, but an ancestor renamed meanwhile would have
        # taken us elsewhere: the kernel's own name for the object must be the path.
        with contextlib.suppress(FileNotFoundError):
            where = os.readlink(f"/proc/self/fd/{fd}")
            if where != str(path):
                raise MountRefused(f"{shown} changed while it was checked: it is now at {where}")
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def _opened(path: Path, shown: str) -> Iterator[int]:
    fd = _open_nofollow(path, shown)
    try:
        yield fd
    finally:
        os.close(fd)


def pin(mount: Mount) -> int:
    """An ``O_PATH`` descriptor on exactly what ``mount``'s check saw, reached again
    from ``/`` without following any symlink; MountRefused when the path now leads to
    anything else (it was swapped after the check). The caller closes it."""
    fd = _open_nofollow(mount.source, str(mount.source))
    if _identity(os.fstat(fd)) != mount.identity:
        os.close(fd)
        raise MountRefused(
            f"{mount.source} changed after it was checked (refused: it is no longer the "
            "directory or file that was checked)"
        )
    return fd
