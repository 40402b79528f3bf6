"""The sandbox image of a ``jarvis code`` run: the project may name its own.

The first of these that is given wins:

1. ``--image IMAGE`` on ``jarvis code run``;
2. ``[code] image`` in the config;
3. the ``image`` of the project's ``.devcontainer/devcontainer.json`` (or
   ``.devcontainer.json``);
4. ``sandbox.image`` (the stock image that ``jarvis sandbox build`` makes).

jarvis never pulls an image: an image that is not in the engine is an error that says
how to get it. The image must still run jarvis's runner (a ``python3`` of at least
3.11 at ``/usr/bin/python3``, where the sandbox starts it): that is checked before
anything runs in it.

The devcontainer file is the project's, so hostile input: it is read without
following a symlink, at most ``MAX_DEVCONTAINER_BYTES``, as JSON with comments and
trailing commas (as devcontainers are written). Only its ``image`` is used. A file
that is too large, not JSON, or builds its image (``build``, ``dockerFile``,
``dockerComposeFile``) is ignored with a note: jarvis builds and runs nothing of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._errors import JarvisError, SandboxUnavailable, UsageError

if TYPE_CHECKING:
    from .._config import Config
    from ..executors import CodeExecutor

__all__ = [
    "DEVCONTAINER_FILES",
    "MAX_DEVCONTAINER_BYTES",
    "ImageChoice",
    "check_image",
    "choose_image",
    "devcontainer_image",
    "strip_jsonc",
    "valid_image",
]

#: Where a project's devcontainer file may be, relative to its root.
DEVCONTAINER_FILES = (".devcontainer/devcontainer.json", ".devcontainer.json")
#: The most of a devcontainer file read; a larger one is ignored.
MAX_DEVCONTAINER_BYTES = 64 * 1024
#: An image reference as an engine takes it (name[:tag][@digest]); nothing else.
_IMAGE = re.compile(
    r"[a-z0-9][a-z0-9._/-]{0,199}(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[0-9a-f]{64})?"
)
#: Keys of a devcontainer that build or compose its image: never acted on.
_BUILD_KEYS = ("build", "dockerFile", "dockerfile", "dockerComposeFile")
#: What the runner needs of the image, checked in it (prints the version when fine).
_PROBE = "import sys; print('python', *sys.version_info[:2]); sys.exit(sys.version_info < (3, 11))"


def valid_image(image: str) -> bool:
    return bool(_IMAGE.fullmatch(image)) and ".." not in image


@dataclass(frozen=True, slots=True)
class ImageChoice:
    """The run's image, where it came from ("--image", "[code] image", the devcontainer
    file's name, or "sandbox.image"), and notes on what was ignored."""

    image: str
    origin: str
    notes: tuple[str, ...] = ()

    @property
    def own(self) -> bool:
        """The project's (or the run's) own image, not the sandbox's default."""
        return self.origin != "sandbox.image"


def strip_jsonc(text: str) -> str:
    """``text`` without ``//`` and ``/* */`` comments and trailing commas, strings kept
    as they are (one pass, linear in its length)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif ch in "}]":
            # A trailing comma: drop the last comma before this bracket (whitespace between).
            k = len(out) - 1
            while k >= 0 and out[k].isspace():
                k -= 1
            if k >= 0 and out[k] == ",":
                del out[k]
            out.append(ch)
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _read_devcontainer(root: str, name: str) -> bytes | None:
    """The file's first MAX_DEVCONTAINER_BYTES + 1 bytes, or None when it is not a
    regular file reached without a symlink."""
    directory, _, leaf = name.rpartition("/")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    dir_fd = os.open(root, flags | os.O_DIRECTORY)
    try:
        if directory:
            inner = os.open(directory, flags | os.O_DIRECTORY, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = inner
        fd = os.open(leaf, flags | os.O_NONBLOCK, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as handle:
        if not _regular(fd):  # a FIFO, a device: O_NONBLOCK kept the open from hanging
            return None
        return handle.read(MAX_DEVCONTAINER_BYTES + 1)


def _regular(fd: int) -> bool:
    import stat

    return stat.S_ISREG(os.fstat(fd).st_mode)


def devcontainer_image(root: str) -> tuple[str, str, tuple[str, ...]]:
    """The image the project's devcontainer file names: (image, the file's name,
    notes); ("", "", notes) when it names none jarvis uses."""
    for name in DEVCONTAINER_FILES:
        try:
            data = _read_devcontainer(root, name)
        except FileNotFoundError:
            continue
        except OSError as exc:  # a symlink (ELOOP), a directory, a device...
            return "", "", (f"{name} ignored: not a regular file jarvis reads ({exc.strerror})",)
        if data is None:
            return "", "", (f"{name} ignored: not a regular file",)
        if len(data) > MAX_DEVCONTAINER_BYTES:
            return "", "", (f"{name} ignored: larger than {MAX_DEVCONTAINER_BYTES} bytes",)
        try:
            parsed = json.loads(strip_jsonc(data.decode("utf-8")))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            return "", "", (f"{name} ignored: not JSON ({str(exc)[:120]})",)
        if not isinstance(parsed, dict):
            return "", "", (f"{name} ignored: not a JSON object",)
        image = parsed.get("image")
        if isinstance(image, str) and image:
            if not valid_image(image):
                return "", "", (f"{name} ignored: {image[:80]!r} is not an image name",)
            return image, name, ()
        builds = [k for k in _BUILD_KEYS if k in parsed]
        if builds:
            return (
                "",
                "",
                (
                    f"{name} ignored: it builds its image ({', '.join(builds)}); jarvis builds "
                    "and runs nothing of a devcontainer (build it yourself, then name it in "
                    "[code] image or --image)",
                ),
            )
        return "", "", (f"{name} ignored: it names no image",)
    return "", "", ()


def choose_image(workspace: str, config: Config, given: str = "") -> ImageChoice:
    """The run's image (see the module's docstring). UsageError for a name that is not
    an image reference."""
    for image, origin in ((given, "--image"), (config.code.image, "[code] image")):
        if image:
            if not valid_image(image):
                raise UsageError(f"{origin} {image[:80]!r} is not an image name")
            return ImageChoice(image, origin)
    image, name, notes = devcontainer_image(workspace)
    if image:
        return ImageChoice(image, name, notes)
    return ImageChoice(config.sandbox.image, "sandbox.image", notes)


def _not_present(image: str) -> SandboxUnavailable:
    return SandboxUnavailable(
        f"image {image} is not in the engine; jarvis never pulls: docker pull {image} or build it"
    )


async def check_image(executor: CodeExecutor, image: str) -> str:
    """That ``image`` is in the engine (never pulled) and runs jarvis's runner: its
    python3's version ("python 3 11"). SandboxUnavailable, saying why, when not."""
    import asyncio

    from ..executors import ExecRequest

    client = getattr(executor, "client", None)
    if client is None:
        raise UsageError("a sandbox image needs a container backend (docker or podman)")

    def present() -> bool:
        import docker.errors

        try:
            client().api.inspect_image(image)
        except docker.errors.ImageNotFound:
            return False
        return True

    try:
        found = await asyncio.to_thread(present)
    except JarvisError:
        raise
    except Exception as exc:
        raise SandboxUnavailable(f"image {image} could not be inspected: {exc}") from exc
    if not found:
        raise _not_present(image)
    why = ""
    output = b""
    try:
        channel = await executor.open(ExecRequest(argv=["python3", "-I", "-c", _PROBE], timeout=60))
        async with channel:
            await channel.close_stdin()
            output = await channel.readline(4096)
            result = await channel.wait()
        if not result.ok:
            why = (
                result.reason
                or f"exit {result.exit_code}: {(output.decode(errors='replace') + result.stderr)[-300:].strip()}"
            )
    except JarvisError as exc:
        why = str(exc)[:300]
    if why:
        raise SandboxUnavailable(
            f"image {image} cannot run jarvis's sandbox: it needs python3 (3.11 or later) "
            f"at /usr/bin/python3 ({why})"
        )
    with contextlib.suppress(UnicodeDecodeError):
        return output.decode().strip()
    return ""
