"""Building the sandbox image with no container registry (``jarvis sandbox build``).

Recipe: mmdebstrap's ``extract`` variant unpacks python3, dash (for /bin/sh), bash (the
openhands agent's terminal runs commands in it), coreutils, the C++ runtime and zlib
that Node.js and the external agents' native binaries link against (Node itself is
mounted from the host, never copied in), pip, venv, git and the CA bundle (see
:data:`PACKAGES`), with their dependencies from Debian's mirror, running no maintainer scripts; the extract hook
writes what those scripts would have (users, /tmp) and precompiles the standard library
(the read-only root could never cache bytecode at run time); the engine then imports the
tarball as the image. About 10 to 30 s, about 140 MB (see PACKAGES). jarvis's own code is NOT in the image: it
is bind-mounted read-only from the installed package at run time, so the host and the
image never disagree on version.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import SandboxError, SandboxUnavailable
from ._policy import INPUT_DIR, SANDBOX_GID, SANDBOX_UID

__all__ = ["DEFAULT_MIRROR", "DEFAULT_SUITE", "BuildResult", "build_image", "image_present"]

DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SUITE = "bookworm"

_HOOK = f"""#!/bin/sh
set -eu
root="$1"
cat >"$root/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
jarvis:x:{SANDBOX_UID}:{SANDBOX_GID}:jarvis sandbox:/tmp:/bin/sh
P
cat >"$root/etc/group" <<'G'
root:x:0:
nogroup:x:65534:
jarvis:x:{SANDBOX_GID}:
G
mkdir -p "$root/tmp" "$root/opt/jarvis" "$root{INPUT_DIR}"
chmod 1777 "$root/tmp"
[ -e "$root/bin/sh" ] || ln -s dash "$root/bin/sh"
# What ca-certificates' maintainer script would build: the system's trust bundle.
mkdir -p "$root/etc/ssl/certs"
cat "$root"/usr/share/ca-certificates/mozilla/*.crt >"$root/etc/ssl/certs/ca-certificates.crt"
# Nothing in the sandbox reads documentation or translations (about 50 MB).
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/info" "$root/usr/share/locale"
# Perl's full library (about 47 MB) comes with git, whose everyday commands are C: only
# its perl scripts (send-email, svn) would need it. perl-base (dpkg's) stays.
rm -rf "$root/usr/share/perl" "$root"/usr/lib/*-linux-gnu/perl
chroot "$root" /usr/bin/python3 -m compileall -q -j 0 /usr/lib/python3.11 \\
    /usr/lib/python3/dist-packages >/dev/null 2>&1 || \\
    chroot "$root" /usr/bin/python3 -m compileall -q /usr/lib/python3.11 \\
    /usr/lib/python3/dist-packages >/dev/null
"""

#: What the image holds. python3-pip, python3-venv and git are for preparing a
#: project's environment (``pip install``, ``python3 -m venv``, cloning) when a run's
#: network policy allows the index or the forge; ca-certificates for their TLS (the
#: bundle is written by the hook: extract runs no maintainer scripts).
PACKAGES = ",".join(
    (
        "python3",
        "dash",
        "bash",
        "coreutils",
        "libstdc++6",
        "libgcc-s1",
        "zlib1g",
        "python3-pip",
        "python3-venv",
        "git",
        "ca-certificates",
    )
)

_CHANGES = [
    f"USER {SANDBOX_UID}:{SANDBOX_GID}",
    "WORKDIR /tmp",
    "ENV PYTHONDONTWRITEBYTECODE=1",
    "LABEL jarvis.sandbox.image=1",
    'CMD ["/usr/bin/python3"]',
]


@dataclass(frozen=True, slots=True)
class BuildResult:
    image: str
    image_id: str
    size_bytes: int
    seconds: float


def image_present(client: Any, image: str) -> bool:
    import docker.errors

    try:
        client.api.inspect_image(image)
    except docker.errors.ImageNotFound:
        return False
    return True


def build_image(
    client: Any,
    image: str,
    *,
    mirror: str = DEFAULT_MIRROR,
    suite: str = DEFAULT_SUITE,
    log: Callable[[str], object] | None = None,
) -> BuildResult:
    """Build ``image`` on the engine behind ``client``. Needs root (mmdebstrap's root
    mode and the hook's chroot) and Debian's mirror."""
    import docker.errors

    if shutil.which("mmdebstrap") is None:
        raise SandboxUnavailable(
            "mmdebstrap is not installed: apt-get install -y --no-install-recommends mmdebstrap"
        )
    if os.geteuid() != 0:
        raise SandboxError("building the sandbox image needs root (mmdebstrap and chroot)")
    start = time.monotonic()
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # tmpfs: faster unpacking
    with tempfile.TemporaryDirectory(prefix="jarvis-image-", dir=base) as work:
        hook = Path(work) / "hook.sh"
        hook.write_text(_HOOK)
        hook.chmod(0o755)
        rootfs = Path(work) / "rootfs.tar"
        command = [
            "mmdebstrap",
            "--quiet",
            "--variant=extract",
            f"--include={PACKAGES}",
            f'--extract-hook={hook} "$1"',
            suite,
            str(rootfs),
            mirror,
        ]
        if log is not None:
            log(f"unpacking python3 from {suite} ({mirror})")
        proc = subprocess.run(
            command, capture_output=True, text=True, env={**os.environ, "TMPDIR": work}
        )
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise SandboxError(f"mmdebstrap failed (exit {proc.returncode}):\n{tail}")
        repository, _, tag = image.rpartition(":")
        if not repository or "/" in tag:
            repository, tag = image, "latest"
        if log is not None:
            log(f"importing {rootfs.stat().st_size >> 20} MiB as {repository}:{tag}")
        try:
            client.api.import_image(
                src=str(rootfs), repository=repository, tag=tag, changes=_CHANGES
            )
            info = client.api.inspect_image(f"{repository}:{tag}")
        except docker.errors.DockerException as exc:
            raise SandboxError(f"the engine refused to import the image: {exc}") from exc
    return BuildResult(
        image=f"{repository}:{tag}",
        image_id=str(info.get("Id", "")),
        size_bytes=int(info.get("Size", 0)),
        seconds=time.monotonic() - start,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m jarvisd.sandbox._image [IMAGE]`` (what sandbox/build.sh runs)."""
    import sys

    from .._config import load_config
    from ._docker import connect

    args = sys.argv[1:] if argv is None else argv
    config = load_config()
    image = args[0] if args else config.sandbox.image
    try:
        result = build_image(
            connect(config),
            image,
            mirror=os.environ.get("JARVIS_SANDBOX_MIRROR", DEFAULT_MIRROR),
            suite=os.environ.get("JARVIS_SANDBOX_SUITE", DEFAULT_SUITE),
            log=lambda text: print(text, file=sys.stderr),
        )
    except SandboxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"built {result.image} ({result.size_bytes >> 20} MB) in {result.seconds:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
