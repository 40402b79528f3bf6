"""Every benchmark module still runs: ``python -m benchmarks.harness --smoke`` (each
module once, one iteration, no OpenJarvis install). Benchmarks nothing runs rot: at
9d73508 ``bench_agents`` crashed (its scripted calls had become held as made up) and
nothing noticed. Speed targets are not checked here (the machine is loaded): they are
``make bench``'s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness import discover
from tests.conftest import IN_CI, REAL_MODELS_DIR, link_real_models

ROOT = Path(__file__).resolve().parents[1]
#: Skips a CI machine may show: external agents are installed by their own tests' setup.
MAY_SKIP_IN_CI = ("is not installed (jarvis agents install",)


@pytest.mark.model  # the model rows run smollm2-135m
def test_every_benchmark_module_runs_once_in_smoke_mode(tmp_path: Path) -> None:
    link_real_models("smollm2-135m")  # the model rows' model, in this test's data dir
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JARVIS_TEST_MODELS_DIR": str(REAL_MODELS_DIR),
           "JARVIS_BENCH_MODELS_DIR": str(REAL_MODELS_DIR)}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.harness", "--smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900, cwd=ROOT, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert not [r for r in rows if r["notes"] == "benchmark crashed"], done.stderr[-4000:]
    ran = [line[3:] for line in done.stderr.splitlines() if line.startswith("== ")]
    assert ran == discover()
    assert len(rows) >= len(ran)
    skipped = [r for r in rows if str(r["notes"]).startswith("skipped")]
    if IN_CI:  # a module that skips in CI checks nothing
        assert all(any(ok in r["notes"] for ok in MAY_SKIP_IN_CI) for r in skipped), skipped
