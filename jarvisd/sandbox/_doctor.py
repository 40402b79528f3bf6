"""``jarvis sandbox doctor``: what works, and what to do about what does not."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from .._config import Config
from .._errors import SandboxError

if TYPE_CHECKING:
    from ..executors import CodeExecutor

__all__ = ["Check", "diagnose"]

# Run inside the sandbox: reports what the policy really produced.
_PROBE = r"""
import os, json, errno
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
try:
    open("/probe", "w")
    root_ro = False
except OSError:
    root_ro = True
ifaces = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
print(json.dumps({"uid": os.getuid(), "cap_eff": status.get("CapEff", "").strip(),
    "no_new_privs": status.get("NoNewPrivs", "").strip(), "root_read_only": root_ro,
    "interfaces": ifaces}))
"""


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def diagnose(config: Config) -> list[Check]:
    checks: list[Check] = []
    backend = config.sandbox.backend
    checks.append(
        Check(
            "backend",
            backend != "none",
            f"sandbox.backend = {backend!r}",
            "" if backend != "none" else 'set sandbox.backend = "docker" (or podman, bwrap)',
        )
    )
    if backend in ("docker", "podman"):
        checks += _engine_checks(config, backend)
    checks.append(_bwrap_check(config))
    has_mmdebstrap = shutil.which("mmdebstrap") is not None
    checks.append(
        Check(
            "image recipe",
            has_mmdebstrap,
            "mmdebstrap found" if has_mmdebstrap else "mmdebstrap missing (needed to build)",
            "" if has_mmdebstrap else "apt-get install -y --no-install-recommends mmdebstrap",
        )
    )
    roots = config.sandbox.allowed_roots
    checks.append(
        Check(
            "allowed roots",
            True,
            ", ".join(roots) if roots else "none: every --mount is refused",
            "" if roots else 'add directories to sandbox.allowed_roots ("PATH" or "PATH:rw")',
        )
    )
    return checks


def _engine_checks(config: Config, flavor: str) -> list[Check]:
    from ._docker import DockerExecutor, connect, engine_address
    from ._image import image_present

    address = engine_address(config, flavor) or "default socket"
    try:
        client = connect(config, flavor, timeout=10)
        version = client.version()
    except (SandboxError, Exception) as exc:
        return [
            Check(
                "engine",
                False,
                f"no {flavor} engine at {address}: {exc}",
                "start one (development: packaging/dev/docker-up.sh, then export the "
                'DOCKER_HOST it prints) or set sandbox.backend = "bwrap"',
            )
        ]
    try:
        checks = [
            Check(
                "engine",
                True,
                f"{flavor} {version.get('Version', '?')} (API {version.get('ApiVersion', '?')}) "
                f"at {address}",
            )
        ]
        image = config.sandbox.image
        present = image_present(client, image)
        checks.append(
            Check(
                "image",
                present,
                f"{image} present" if present else f"{image} missing",
                "" if present else "jarvis sandbox build",
            )
        )
        if not present:
            return checks
    finally:
        client.close()
    checks.append(_policy_check(DockerExecutor(config, flavor=flavor)))
    return checks


def _policy_check(executor: CodeExecutor) -> Check:
    import json

    from ..executors import ExecRequest, run_to_completion

    try:
        result = asyncio.run(
            run_to_completion(executor, ExecRequest(argv=["python3", "-c", _PROBE], timeout=30))
        )
        facts = json.loads(result.stdout.strip().splitlines()[-1])
    except (SandboxError, ValueError, IndexError) as exc:
        return Check(
            "policy", False, f"a probe container failed: {exc}", "see jarvis -vv sandbox doctor"
        )
    finally:
        close = getattr(executor, "close", None)
        if close is not None:
            close()
    problems = []
    if facts["uid"] == 0:
        problems.append("runs as root")
    if facts["cap_eff"].strip("0"):
        problems.append(f"capabilities left: {facts['cap_eff']}")
    if facts["no_new_privs"] != "1":
        problems.append("no-new-privileges not set")
    if not facts["root_read_only"]:
        problems.append("root file system writable")
    if facts["interfaces"] != ["lo"]:
        problems.append(f"network interfaces: {facts['interfaces']}")
    detail = (
        f"uid {facts['uid']}, no capabilities, no-new-privileges, read-only root, "
        f"network: {'/'.join(facts['interfaces'])}, {result.duration_s:.2f}s a start"
    )
    return Check(
        "policy",
        not problems,
        detail if not problems else "; ".join(problems),
        "" if not problems else "the engine ignored hardening options: use dockerd >= 20.10",
    )


def _bwrap_check(config: Config) -> Check:
    from ._bwrap import bwrap_path

    path = bwrap_path()
    if path is None:
        return Check("bwrap", False, "bubblewrap not installed", "apt-get install -y bubblewrap")
    probe = subprocess.run(
        [
            path,
            "--unshare-all",
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--symlink",
            "usr/bin",
            "/bin",
            "/usr/bin/true",
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )
    if probe.returncode != 0:
        return Check(
            "bwrap",
            False,
            f"bubblewrap cannot create namespaces here: {probe.stderr.strip()[:200]}",
            "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)",
        )
    return Check("bwrap", True, f"{path} works (no cgroup limits: rlimits only)")
