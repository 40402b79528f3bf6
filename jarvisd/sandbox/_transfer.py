"""A run's files on an engine that cannot see this machine's (one elsewhere, or
``sandbox.docker_remote``): archives in, and back out for ``:rw`` mounts.

Per run, a labelled volume holds one directory per thing the sandbox needs: jarvis's
code, the run's input files, each mount, each cover (``_covers``). The archive goes
into it through a *loader*: a container of the sandbox image that is created, never
started, with the volume at LOAD_DIR (``put_archive`` into a read-only root file system
is refused, into a volume it is not). The sandbox's container then binds those
directories, at the paths on the engine's machine the volume reports, where it would
have bound this machine's: so a read-only mount is read-only (a read-only volume refuses
``put_archive``), and a mount's root has its owner and mode (a volume's own root stays
root's whatever the archive says). Entries keep their owners and modes, as a bind shows
them.

When the container is gone, each ``:rw`` mount's directory comes back with
``get_archive`` through the loader, is checked and applied (``_archive.write_back``),
and the loader and the volume are removed. What a crash leaves behind carries the
sandbox's labels and is swept like its containers (``_engine.sweep_orphans``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import SandboxError
from ._archive import ArchiveLimits, Packer, write_back
from ._copy import NameFilter
from ._engine import Engine, _no_answer, _translate
from ._mounts import BLOCKED_PATTERNS, Mount, pin
from ._policy import CODE_ROOT, SandboxPolicy, code_dirs, ensure_bytecode

__all__ = ["LOAD_DIR", "Shipment", "ship"]

log = logging.getLogger(__name__)

#: Where the loader has the run's volume.
LOAD_DIR = "/x"
_O_PATH = getattr(os, "O_PATH", os.O_RDONLY)


@dataclass
class Shipment:
    """One run's volume and loader on the engine, and what must come back."""

    api: Any
    engine: Engine
    name: str
    limits: ArchiveLimits
    names: NameFilter
    loader: str = ""
    mountpoint: str = ""
    #: (source on the engine's machine, target, read_only): in place of binds.
    code: list[tuple[str, str, bool]] = field(default_factory=list)
    inputs: str = ""
    mounts: list[str] = field(default_factory=list)
    covers: list[tuple[str, str, bool]] = field(default_factory=list)
    #: (mount, its directory in the volume, the paths sent): to bring back.
    writable: list[tuple[Mount, str, set[str]]] = field(default_factory=list)

    @property
    def volume(self) -> str:
        return f"{self.name}-files"

    def source(self, arc: str) -> str:
        return f"{self.mountpoint}/{arc}"

    def bring_back(self) -> None:
        """Apply each ``:rw`` mount's tree as the sandbox left it to the host's."""
        for mount, arc, sent in self.writable:
            try:
                chunks, _stat = self.api.get_archive(self.loader, f"{LOAD_DIR}/{arc}/.")
            except Exception as exc:
                raise _translate(exc, f"fetch the change to {mount.source}") from exc
            root = pin(mount)
            try:
                done = write_back(chunks, root, sent, self.limits, self.names, str(mount.source))
            finally:
                os.close(root)
            if done.skipped:
                log.warning(
                    "sandbox: not written back to %s (blocked names, devices, FIFOs): %s",
                    mount.source,
                    ", ".join(done.skipped[:10]),
                )

    def remove(self) -> None:
        import docker.errors
        import requests.exceptions

        quiet = (docker.errors.DockerException, requests.exceptions.RequestException)
        if self.loader:
            try:
                self.api.remove_container(self.loader, force=True)
            except Exception as exc:
                if _no_answer(exc):
                    self.engine.remove_later(self.loader)
                    return  # its volume goes when the sweep finds it
                if not isinstance(exc, quiet):
                    raise
        with contextlib.suppress(*quiet):
            self.api.remove_volume(self.volume, force=True)


def ship(
    api: Any,
    engine: Engine,
    policy: SandboxPolicy,
    name: str,
    labels: dict[str, str],
    limits: ArchiveLimits,
    mounts: Sequence[Mount],
    inputs: Path | None,
    covers: Sequence[str],
) -> Shipment:
    """Pack what the run needs, create its volume and loader, send the archive."""
    names = NameFilter(BLOCKED_PATTERNS)
    shipment = Shipment(api, engine, name, limits, names)
    packer = Packer(limits, names)
    try:
        code = _code_archive(limits)
        shipment.code = [(f"code/{key}", f"{CODE_ROOT}/{key}", True) for key in sorted(code_dirs())]
        if inputs is not None:
            with _opened(inputs) as fd:
                packer.add_tree("inputs", fd, (0, 0), filtered=False)
            shipment.inputs = "inputs"
        for i, mount in enumerate(mounts):
            fd = pin(mount)
            try:
                if not os.path.isdir(f"/proc/self/fd/{fd}"):
                    raise SandboxError(
                        f"{mount.source} is a file: on an engine on another machine only "
                        "directories can be mounted (they travel as archives); mount its "
                        "directory"
                    )
                # Owners and modes as a bind would show them.
                sent = packer.add_tree(f"m{i}", fd, None, filtered=True)
            finally:
                os.close(fd)
            shipment.mounts.append(f"m{i}")
            if not mount.read_only:
                shipment.writable.append((mount, f"m{i}", sent))
        for i, cover in enumerate(covers):
            packer.add_dir(f"c{i}", (0, 0), 0o711)
            # Read-write for the engine, which makes the mount points in it (as _covers).
            shipment.covers.append((f"c{i}", cover, False))
        archive = packer.finish()
        _load(shipment, policy.image, labels, [code, archive])
    except BaseException:
        packer.close()
        shipment.remove()
        raise
    packer.close()
    shipment.code = [(shipment.source(a), t, ro) for a, t, ro in shipment.code]
    shipment.covers = [(shipment.source(a), t, ro) for a, t, ro in shipment.covers]
    if shipment.inputs:
        shipment.inputs = shipment.source(shipment.inputs)
    shipment.mounts = [shipment.source(a) for a in shipment.mounts]
    return shipment


def _code_archive(limits: ArchiveLimits) -> bytes:
    """jarvis's own packages as a tar (``code/NAME``), with their bytecode so the sandbox
    does not compile them at every start: made once per process (as ``ensure_bytecode``
    is run once: a file edited since is still correct inside, only slower to start)."""
    dirs = code_dirs()
    key = tuple(sorted((k, str(p)) for k, p in dirs.items()))
    if key not in _CODE:
        ensure_bytecode(dirs)
        packer = Packer(limits, NameFilter(()))
        try:
            packer.add_dir("code", (0, 0), 0o755)
            for name, path in sorted(dirs.items()):
                with _opened(path) as fd:
                    packer.add_tree(f"code/{name}", fd, (0, 0), filtered=False)
            _CODE[key] = packer.finish().read()
        finally:
            packer.close()
    return _CODE[key]


_CODE: dict[tuple[tuple[str, str], ...], bytes] = {}


def _load(shipment: Shipment, image: str, labels: dict[str, str], archives: list[Any]) -> None:
    from docker.types import Mount as DockerMount

    api = shipment.api
    doing = "create the run's volume and loader"
    try:
        # The engine makes the volume, labelled, with the loader: one call less.
        volume = DockerMount(LOAD_DIR, shipment.volume, type="volume", labels=labels)
        host_config = api.create_host_config(
            network_mode="none", read_only=True, cap_drop=["ALL"], mounts=[volume]
        )
        config = api.create_container_config(
            image, ["true"], network_disabled=True, host_config=host_config, labels=labels
        )
        loader = f"{shipment.name}-load"
        try:
            shipment.loader = api.create_container_from_config(config, loader)["Id"]
        except Exception as exc:
            if _no_answer(exc):
                shipment.engine.remove_later(loader)
            raise
        doing = "send the run's files to the engine"
        for archive in archives:
            api.put_archive(shipment.loader, LOAD_DIR, archive)
        shipment.mountpoint = api.inspect_volume(shipment.volume)["Mountpoint"]
    except SandboxError:
        raise
    except Exception as exc:
        if _no_answer(exc):
            raise shipment.engine.stalled(doing) from exc
        raise _translate(exc, doing) from exc


@contextlib.contextmanager
def _opened(path: Path) -> Any:
    fd = os.open(path, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)
