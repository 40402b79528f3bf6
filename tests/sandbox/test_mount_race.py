"""Mounts against a swap between the check and the engine's bind, on the real engine.

The engine resolves a mount's path string itself when the container starts: a checked
directory swapped for a symlink in between would mount whatever the link points at.
Two attackers race that window, each for at least 200 attempts, and must never win:

* host side: a process flips an allowed directory with a symlink to a directory outside
  every allowed root (``renameat2(RENAME_EXCHANGE)``, as fast as it can) while
  sandboxes are started with that directory mounted;
* cross-sandbox: a sandbox with an ``:rw`` mount does the same flip inside its own
  mount while a second sandbox starts with the flipped path mounted read-write.

An attempt ends refused (the check, the staging or the in-container check saw the
swap), ran with the checked directory, or escaped (the outside directory was visible or
written). Each test prints its counts.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jarvisd._errors import MountRefused
from jarvisd.executors import ExecRequest, run_to_completion
from jarvisd.sandbox import DockerExecutor

from .conftest import sandbox_config

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("engine")]

ATTEMPTS = 200
CONCURRENCY = 4
SECRET = "OUTSIDE-EVERY-ALLOWED-ROOT"

# Flips PATH (a directory) and PATH.link (a symlink) with one atomic syscall, until its
# stdin closes. Runs on the host and inside a sandbox.
FLIPPER = r"""
import ctypes, os, sys, threading
path = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
a, b = path.encode(), (path + ".link").encode()
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
print("flipping", flush=True)
n = 0
while not done.is_set():
    for _ in range(1000):
        libc.renameat2(-100, a, -100, b, 2)  # AT_FDCWD, RENAME_EXCHANGE
    n += 1000
# Leave the directory in place.
if os.path.islink(path):
    libc.renameat2(-100, a, -100, b, 2)
print("flips", n, flush=True)
"""

# The attempt's program: did the mount show the outside directory, could it write there?
PROBE = """
import os, sys
target = sys.argv[1]
seen = os.path.exists(os.path.join(target, "secret.txt"))
try:
    with open(os.path.join(target, "pwned.txt"), "w") as f:
        f.write("pwned")
    wrote = True
except OSError:
    wrote = False
print("ESCAPED" if seen else "clean", "wrote" if wrote else "")
"""


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, outcome: str, reason: str = "") -> None:
        self.outcomes[outcome] += 1
        if reason:
            self.reasons[reason] += 1

    def report(self, name: str, seconds: float) -> str:
        total = sum(self.outcomes.values())
        parts = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        why = "; ".join(f"{v}x {k}" for k, v in self.reasons.most_common(4))
        return f"{name}: {total} attempts in {seconds:.1f}s: {parts} (refusals: {why})"


def outside_dir(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.chmod(0o777)
    (outside / "secret.txt").write_text(SECRET)
    (outside / "secret.txt").chmod(0o644)
    return outside


def flippable(ro: Path, outside: Path) -> Path:
    """ro/x, a directory, beside ro/x.link, a symlink to ``outside``."""
    target = ro / "x"
    target.mkdir()
    (ro / "x.link").symlink_to(outside)
    return target


def assert_contained(tally: Tally, outside: Path, report: str) -> None:
    assert sum(tally.outcomes.values()) == ATTEMPTS
    assert tally.outcomes["escaped"] == 0, report
    assert not (outside / "pwned.txt").exists()
    assert tally.outcomes["failed otherwise"] == 0, report


def _reason(exc: MountRefused) -> str:
    text = str(exc)
    for key in ("outside the allowed roots", "changed while it was checked",
                "changed after it was checked", "not the directory or file the host checked",
                "does not exist", "cannot be"):  # fmt: skip
        if key in text:
            return key
    return text[:60]


async def race(executor: DockerExecutor, target: Path, writable: bool, tally: Tally) -> None:
    """ATTEMPTS sandbox starts with ``target`` mounted, CONCURRENCY at a time."""
    gate = asyncio.Semaphore(CONCURRENCY)
    request = ExecRequest(
        argv=["python3", "-c", PROBE, str(target)],
        timeout=30,
        mounts=(f"{target}:rw" if writable else str(target),),
    )

    async def attempt() -> None:
        async with gate:
            try:
                result = await run_to_completion(executor, request)
            except MountRefused as exc:
                tally.add("refused", _reason(exc))
                return
        if "ESCAPED" in result.stdout:
            tally.add("escaped")
        elif result.stdout.startswith("clean"):
            tally.add("ran with the checked directory")
        else:
            tally.add("failed otherwise", (result.stderr or result.stdout)[-80:])

    await asyncio.gather(*(attempt() for _ in range(ATTEMPTS)))


def test_host_side_swap_never_mounts_outside(roots: tuple[Path, Path], tmp_path: Path) -> None:
    ro, _rw = roots
    outside = outside_dir(tmp_path)
    target = flippable(ro, outside)
    executor = DockerExecutor(sandbox_config(roots))
    flipper = subprocess.Popen(
        [sys.executable, "-c", FLIPPER, str(target)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    tally = Tally()
    start = time.monotonic()
    try:
        assert flipper.stdout is not None and flipper.stdout.readline() == "flipping\n"
        asyncio.run(race(executor, target, False, tally))
    finally:
        flips, _ = flipper.communicate(timeout=30)
        executor.close()
    report = tally.report("host-side swap", time.monotonic() - start)
    print(f"\n{report}; swapper: {flips.split()[-1]} flips")
    assert_contained(tally, outside, report)


def test_cross_sandbox_swap_never_mounts_outside(roots: tuple[Path, Path], tmp_path: Path) -> None:
    _ro, rw = roots
    outside = outside_dir(tmp_path)
    shared = rw / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    target = shared / "d"
    executor = DockerExecutor(sandbox_config(roots))
    # The attacker: a sandbox that may write `shared`, making d and d.link (to a host
    # path outside every root) and flipping them until its stdin closes.
    attacker_code = (
        f"import os\nos.mkdir({str(target)!r})\n"
        f"os.symlink({str(outside)!r}, {str(target) + '.link'!r})\n" + FLIPPER
    )
    attacker_request = ExecRequest(
        argv=["python3", "-c", attacker_code, str(target)], timeout=300,
        mounts=(f"{shared}:rw",),
    )  # fmt: skip
    tally = Tally()

    async def scenario() -> str:
        attacker = await executor.open(attacker_request)
        try:
            assert await attacker.readline() == b"flipping\n"
            await race(executor, target, True, tally)
        finally:
            await attacker.close_stdin()
            flips = (await attacker.readline()).decode()
            await attacker.wait()
        return flips

    start = time.monotonic()
    try:
        flips = asyncio.run(scenario())
    finally:
        executor.close()
    report = tally.report("cross-sandbox swap", time.monotonic() - start)
    print(f"\n{report}; attacking sandbox: {flips.split()[-1]} flips")
    assert int(flips.split()[-1]) > 0
    assert_contained(tally, outside, report)


def test_a_swap_after_the_check_is_refused_at_each_layer(
    roots: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deterministic: the swap lands exactly between the check and the container start
    (the check is wrapped to swap right after it). With staging (root, engine in our
    mount namespace) the engine never sees the path; without it the prelude refuses
    inside the container. Each layer alone stops it."""
    ro, _rw = roots
    outside = outside_dir(tmp_path)
    target = flippable(ro, outside)
    executor = DockerExecutor(sandbox_config(roots))
    check = executor.mounts.check

    def check_then_swap(request: str) -> object:
        mount = check(request)
        target.rename(ro / "x.real")
        (ro / "x.link").rename(target)
        return mount

    def unswap() -> None:
        target.rename(ro / "x.link")
        (ro / "x.real").rename(target)

    monkeypatch.setattr(executor.mounts, "check", check_then_swap)
    request = ExecRequest(argv=["python3", "-c", PROBE, str(target)], timeout=30,
                          mounts=(str(target),))  # fmt: skip
    layers = [False]
    if os.geteuid() == 0:
        layers.insert(0, True)
    try:
        for staging in layers:
            executor.staging = staging
            with pytest.raises(MountRefused) as info:
                asyncio.run(run_to_completion(executor, request))
            if staging:
                assert "changed while it was checked" in str(info.value), info.value
            else:
                assert "not the directory or file the host checked" in str(info.value)
            unswap()
        # Unswapped, the same mount runs.
        monkeypatch.undo()
        result = asyncio.run(run_to_completion(executor, request))
        assert result.ok and result.stdout.startswith("clean"), result
    finally:
        executor.close()
