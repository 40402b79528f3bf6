"""The one sandbox policy every backend applies, read from config ``[sandbox]``.

Agents' code, the in-container agent runner and ``jarvis sandbox run`` all get exactly
this: no network, read-only root, tmpfs /tmp, no capabilities, no-new-privileges, a
non-root user, pids/memory/CPU limits, an init process, checked read-only mounts.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .._config import Config
from .._errors import ConfigError, MountRefused, SandboxError
from ..executors import Channel
from ._mounts import Mount
from ._prelude import READY, REFUSED

__all__ = [
    "CODE_ROOT",
    "CODE_UID",
    "INPUT_DIR",
    "LABEL",
    "OWNER_LABEL",
    "SANDBOX_GID",
    "SANDBOX_UID",
    "SandboxPolicy",
    "code_dirs",
    "confirm_mounts",
    "container_argv",
    "ensure_bytecode",
    "parse_size",
    "prelude_argv",
]

#: Every container jarvis starts carries this label (value "1"): sweeps find them by it.
LABEL = "jarvis.sandbox"
#: "HOST:PID" of the process that started the container: sweeps spare live owners'.
OWNER_LABEL = "jarvis.sandbox.owner"
#: The user sandboxed programs run as when jarvis itself runs as root (keep in step
#: with the image's /etc/passwd written by ``_image.py``).
SANDBOX_UID = 10001
SANDBOX_GID = 10001
#: The user model-written code runs as inside a separated agent runner (ExecRequest
#: .separate_code; jarvisd.executors._privsep): never the runner's own uid.
CODE_UID = 10002
#: Where jarvis's own packages appear inside the sandbox (read-only, PYTHONPATH).
CODE_ROOT = "/opt/jarvis"
#: Where an ExecRequest's files appear (read-only; copied to /tmp/work before running).
INPUT_DIR = "/opt/jarvis-in"
#: The prelude (``_prelude.py``) inside the sandbox: it runs before the program.
PRELUDE = f"{CODE_ROOT}/jarvisd/sandbox/_prelude.py"

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_PYTHON_NAME = re.compile(r"^python(3(\.\d+)?)?$")


def parse_size(text: str, key: str = "sandbox.memory") -> int:
    """ "512m" -> bytes. Units k, m, g, t (powers of 1024)."""
    match = _SIZE.match(text)
    if not match:
        raise ConfigError("<config>", key, 'a size such as "512m" or "1g"', text)
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match[2].lower()]
    return int(float(match[1]) * scale)


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    image: str = "jarvis-sandbox:latest"
    memory_bytes: int = 512 << 20
    cpus: float = 1.0
    pids: int = 128
    tmp_bytes: int = 64 << 20
    timeout: float = 120.0
    uid: int = SANDBOX_UID
    gid: int = SANDBOX_GID

    @classmethod
    def from_config(cls, config: Config) -> SandboxPolicy:
        s = config.sandbox
        if s.pids < 8:
            raise ConfigError(config.source or "<config>", "sandbox.pids", "at least 8", s.pids)
        if s.cpus <= 0:
            raise ConfigError(config.source or "<config>", "sandbox.cpus", "more than 0", s.cpus)
        uid, gid = os.getuid(), os.getgid()
        if uid == 0:
            uid, gid = SANDBOX_UID, SANDBOX_GID
        return cls(
            image=s.image,
            memory_bytes=parse_size(s.memory, "sandbox.memory"),
            cpus=s.cpus,
            pids=s.pids,
            tmp_bytes=parse_size(s.tmp_size, "sandbox.tmp_size"),
            timeout=s.timeout,
            uid=uid,
            gid=gid,
        )

    @property
    def memory_text(self) -> str:
        return f"{self.memory_bytes >> 20} MiB"


def code_dirs() -> dict[str, Path]:
    """The installed ``jarvisd`` and ``runners`` package directories, mounted read-only
    at CODE_ROOT so the sandbox runs exactly the host's version of jarvis."""
    import jarvisd

    found = {"jarvisd": Path(jarvisd.__file__).resolve().parent}
    try:
        import runners
    except ImportError as exc:  # pragma: no cover - broken installation
        raise SandboxError(f"jarvis's runners package is not installed: {exc}") from exc
    runners_file = getattr(runners, "__file__", None)
    if runners_file is None:  # pragma: no cover
        raise SandboxError("jarvis's runners package has no location")
    found["runners"] = Path(runners_file).resolve().parent
    return found


#: The image's interpreter (Debian bookworm): bytecode written on the host for the same
#: cache tag is valid inside the sandbox too.
IMAGE_CACHE_TAG = "cpython-311"


def ensure_bytecode(dirs: dict[str, Path]) -> None:
    """Compile jarvis's packages where they are installed (what pip does at install
    time; an editable install or a tree edited since may lack it). Inside the sandbox
    the code is read-only, so without this every start would compile it again (about
    0.3 s). Skipped when the host interpreter's bytecode would not fit the image's, or
    the installation is not writable."""
    import compileall

    if sys.implementation.cache_tag != IMAGE_CACHE_TAG:
        return
    for directory in dirs.values():
        if directory in _COMPILED or not os.access(directory, os.W_OK):
            continue
        compileall.compile_dir(str(directory), quiet=2, workers=1)
        # Once per process: a file edited later is still correct inside (Python checks
        # the source's mtime), only slower to start.
        _COMPILED.add(directory)


_COMPILED: set[Path] = set()


def container_argv(argv: Sequence[str]) -> list[str]:
    """Host argv -> sandbox argv: a host Python interpreter (``sys.executable``, a venv's
    python) becomes the image's ``/usr/bin/python3``."""
    out = list(argv)
    if out and (out[0] == sys.executable or _PYTHON_NAME.match(os.path.basename(out[0]))):
        out[0] = "/usr/bin/python3"
    return out


def prelude_argv(
    argv: Sequence[str],
    *,
    verify: Sequence[Mount] = (),
    inputs: bool = False,
    forward: Sequence[str] = (),
) -> list[str]:
    """``argv`` behind the sandbox's prelude when something must happen first: check
    that each mount in ``verify`` is the object that was checked, copy the request's
    files (at INPUT_DIR) to /tmp/work, start the egress forwarder (``forward``: the
    prelude's arguments, ``_egress.forward_args``)."""
    if not verify and not inputs and not forward:
        return list(argv)
    prelude = ["/usr/bin/python3", "-I", "-S", PRELUDE]
    for mount in verify:
        prelude += ["--mount", mount.target, *map(str, mount.identity)]
    if inputs:
        prelude += ["--inputs", INPUT_DIR]
    prelude += forward
    return [*prelude, "--", *argv]


async def confirm_mounts(channel: Channel) -> None:
    """Wait for the prelude's word that every mount is the object that was checked;
    MountRefused when it is not (the program never started), SandboxError when the
    sandbox ended before the prelude could say."""
    try:
        line = await channel.readline(len(READY) + 1)
    except BaseException:
        await channel.stop("cancelled")
        raise
    if line == READY:
        return
    if line:  # not the prelude's word: end it
        await channel.kill("refused")
    result = await channel.wait()
    said = [ln for ln in result.stderr.splitlines() if ln.startswith(REFUSED)]
    if said:
        raise MountRefused(said[0].removeprefix(REFUSED).strip())
    raise SandboxError(
        "the sandbox ended before it confirmed that its mounts are the ones checked "
        f"(exit {result.exit_code}{', ' + result.reason if result.reason else ''}): "
        f"{result.stderr.strip()[-300:]}"
    )
