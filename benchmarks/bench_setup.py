"""``jarvis code``'s project toolchain (``jarvisd.code._setup``) on a real project, the
``inflection`` 0.5.1 sdist: its 455 pytest tests.

Rows:
- the test command in the sandbox on the cached environment (the venv mounted
  read-only, the workspace read-only), against the same command on the host in a venv
  with pytest (target: at most 1.3x; a container's start is most of the difference);
- setup with a warm cache (the environment found by its key: hashing the dependency
  files, asking the engine for the image's id), target at most 2 s; the cold setup
  (a venv, pip from the machine's own sources) is reported beside it.

Both interleaved. The sdist is downloaded once into ~/.cache/jarvis-tests (as the
test does). Rows are skipped, with the reason, without a container engine.

    python -m benchmarks.bench_setup [--quick]
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from benchmarks.harness import BenchEnv, Row

TEST = "python3 -m pytest -q test_inflection.py"
SDIST_DIR = Path.home() / ".cache" / "jarvis-tests"
TEST_TARGET = 1.3
WARM_TARGET_S = 2.0


def _sdist() -> tuple[Path | None, str]:
    path = SDIST_DIR / "inflection-0.5.1.tar.gz"
    if path.is_file():
        return path, ""
    SDIST_DIR.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "inflection==0.5.1", "-d", str(SDIST_DIR)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode != 0:
        return None, f"could not download inflection 0.5.1: {done.stderr[-200:]}"
    return path, ""


def _problem() -> str:
    from jarvisd._config import Config
    from jarvisd._errors import SandboxError
    from jarvisd.sandbox import connect
    from jarvisd.sandbox._image import image_present

    config = Config()
    try:
        client = connect(config, timeout=10)
    except SandboxError as exc:
        return f"no container engine reachable: {exc}"
    try:
        if not image_present(client, config.sandbox.image):
            return f"image {config.sandbox.image} missing (jarvis sandbox build)"
    finally:
        client.close()
    return ""


def _skipped(reason: str) -> list[Row]:
    return [
        Row("`jarvis code` test command in the sandbox on the cached env", float("nan"), "s",
            baseline_name="the same command on the host", target=f"<= {TEST_TARGET}x",
            notes=f"skipped: {reason}"),
        Row("`jarvis code` setup with a warm cache", float("nan"), "s",
            target=f"<= {WARM_TARGET_S} s", notes=f"skipped: {reason}"),
    ]  # fmt: skip


def run(env: BenchEnv) -> list[Row]:
    from jarvisd._config import Config
    from jarvisd.code._pipconf import host_pip_sources
    from jarvisd.code._setup import plan_setup, prepare_toolchain, with_toolchain
    from jarvisd.code._store import Workspace
    from jarvisd.code._testrun import run_test
    from jarvisd.sandbox import executor_for_backend

    sdist, problem = _sdist()
    problem = problem or _problem()
    if sdist is None or problem:
        return _skipped(problem)
    root = env.tmp / "setup-bench"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    os.environ["JARVIS_CACHE_DIR"] = str(root / "cache")  # a cold cache of its own
    with tarfile.open(sdist) as archive:
        archive.extractall(root, filter="data")
    project = root / "inflection-0.5.1"
    os.chmod(root, 0o755)
    config = Config()
    config = dataclasses.replace(
        config, sandbox=dataclasses.replace(config.sandbox, allowed_roots=(str(project),))
    )
    plan = plan_setup(str(project))
    assert plan is not None
    # The machine's local indexes only, when it has some (as the test): no host reached.
    sources = host_pip_sources()
    local = [u for u in sources.indexes if u.startswith("file:")]
    if local:
        sources = dataclasses.replace(
            sources, index_url=local[0], extra_index_urls=tuple(local[1:])
        )
    executor = executor_for_backend(config.sandbox.backend, config)

    async def setup() -> object:
        return await prepare_toolchain(plan, str(project), config, executor, sources=sources)

    start = time.perf_counter()
    toolchain = asyncio.run(setup())
    cold = time.perf_counter() - start
    tested = with_toolchain(executor, toolchain, str(project))  # type: ignore[arg-type]
    ws = Workspace(id="bench", source=str(project), kind="copy", path=str(project),
                   git_dir="", branch="", base="", test=TEST)  # fmt: skip
    host_env = {**os.environ, "PYTHONPATH": str(project), "PYTHONDONTWRITEBYTECODE": "1"}
    host_argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "test_inflection.py",
    ]
    runs = env.runs(5, 3)
    warm: list[float] = []
    ours: list[float] = []
    base: list[float] = []
    for i in range(env.warmups() + runs):
        start = time.perf_counter()
        again = asyncio.run(setup())
        took_warm = time.perf_counter() - start
        assert again.cached  # type: ignore[attr-defined]
        start = time.perf_counter()
        result = asyncio.run(run_test(tested, ws, 300.0))
        took = time.perf_counter() - start
        assert "455 passed" in result.output, result.output[-500:]
        start = time.perf_counter()
        subprocess.run(host_argv, cwd=project, env=host_env, check=True, capture_output=True)
        took_host = time.perf_counter() - start
        if i >= env.warmups():
            warm.append(took_warm)
            ours.append(took)
            base.append(took_host)
    close = getattr(executor, "close", None)
    if close is not None:
        close()
    shutil.rmtree(root, ignore_errors=True)
    test_ratio = statistics.median(ours) / statistics.median(base)
    return [
        Row(
            "`jarvis code` test command in the sandbox on the cached env (inflection, 455 tests)",
            statistics.median(ours),
            "s",
            baseline=statistics.median(base),
            baseline_name="the same pytest run on the host",
            target=f"<= {TEST_TARGET}x",
            passed=test_ratio <= TEST_TARGET,
            notes=f"median of {runs}, interleaved; venv and workspace mounted read-only",
        ),
        Row(
            "`jarvis code` setup with a warm cache (inflection)",
            statistics.median(warm),
            "s",
            baseline=cold,
            baseline_name="the cold setup (venv, pip install, in the sandbox)",
            target=f"<= {WARM_TARGET_S} s",
            passed=statistics.median(warm) <= WARM_TARGET_S,
            notes=f"median of {runs}; the key hashes the dependency files and the image id",
        ),
    ]


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for row in run(BenchEnv(sys.executable, Path(tmp), quick=args.quick)):
            print(row)
