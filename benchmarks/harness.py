"""Side-by-side benchmark harness.

Each ``benchmarks/bench_*.py`` module exposes ``run(env: BenchEnv) -> list[Row]``. Every
row measures jarvis and its baseline (OpenJarvis, a raw engine call, a plain
``docker run``...) in the same run, interleaved where possible, because these machines
are noisy: only ratios measured side by side are compared with the targets.

    python -m benchmarks.harness [--only NAME ...] [--quick] [--out DIR]
    python -m benchmarks.harness --smoke

writes ``DIR/results.md`` and ``DIR/results.json`` (default ``benchmarks/results``).

``--smoke`` (CI) runs every module once, at its smallest (one iteration each, no
OpenJarvis install), into a temporary directory: it checks that each module still
runs, not how fast; it fails when a module crashes, never on a speed target.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPENJARVIS_VERSION = "1.0.4"


@dataclass
class Row:
    name: str
    ours: float
    unit: str  # "s", "ms", "us", "MB", "tasks/s", ...
    baseline: float | None = None
    baseline_name: str = ""
    target: str = ""  # human-readable target, e.g. "<= 1/15 of OpenJarvis"
    passed: bool | None = None  # None: informational row, no target
    notes: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.baseline in (None, 0):
            return None
        return self.ours / self.baseline


@dataclass
class BenchEnv:
    python: str  # the interpreter with jarvis installed
    tmp: Path
    quick: bool = False
    openjarvis_python: str | None = None  # interpreter of OpenJarvis's own venv
    openjarvis_error: str = ""
    smoke: bool = False  # one iteration of everything: does each module still run?

    def runs(self, full: int, quick: int = 3) -> int:
        if self.smoke:
            return 1
        return quick if self.quick else full

    def warmups(self, n: int = 1) -> int:
        """Untimed runs first: none in the smoke run, which times nothing that counts."""
        return 0 if self.smoke else n

    def jarvis_bin(self) -> str:
        return str(Path(self.python).parent / "jarvis")


def percentile(values: Sequence[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * pct / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def time_commands(
    commands: dict[str, list[str]], runs: int, warmup: int = 1, env: dict[str, str] | None = None
) -> dict[str, list[float]]:
    """Wall time of whole processes, interleaved A B A B ... so drift hits both."""
    times: dict[str, list[float]] = {k: [] for k in commands}
    for i in range(warmup + runs):
        for key, argv in commands.items():
            start = time.perf_counter()
            subprocess.run(
                argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False
            )
            elapsed = time.perf_counter() - start
            if i >= warmup:
                times[key].append(elapsed)
    return times


def time_calls(
    fns: dict[str, Callable[[], object]], runs: int, warmup: int = 1
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for i in range(warmup + runs):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - start
            if i >= warmup:
                times[key].append(elapsed)
    return times


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ensure_openjarvis(cache: Path) -> tuple[str | None, str]:
    """A venv with PyPI openjarvis, created once under ``cache``."""
    venv = cache / f"openjarvis-{OPENJARVIS_VERSION}"
    python = venv / "bin" / "python"
    if python.exists():
        return str(python), ""
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             f"openjarvis=={OPENJARVIS_VERSION}"],
            check=True, capture_output=True, text=True, timeout=1200,
        )  # fmt: skip
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return None, f"could not install openjarvis {OPENJARVIS_VERSION}: {str(detail)[-300:]}"
    return str(python), ""


def discover() -> list[str]:
    return sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py"))


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if value != value:  # NaN
        return "n/a"
    return f"{value:.4g} {unit}"


def render_markdown(rows: list[Row], meta: Mapping[str, object]) -> str:
    lines = [
        "# Benchmark results",
        "",
        f"Machine: {meta['machine']}; Python {meta['python']}; {meta['when']}.",
        "Ratios are ours / baseline, measured side by side in this run.",
        "",
        "| benchmark | jarvis | baseline | ratio | target | result | notes |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
        base = f"{fmt(r.baseline, r.unit)} ({r.baseline_name})" if r.baseline is not None else "-"
        result = {True: "pass", False: "FAIL", None: "info"}[r.passed]
        lines.append(
            f"| {r.name} | {fmt(r.ours, r.unit)} | {base} | {ratio} | {r.target or '-'} | "
            f"{result} | {r.notes} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", help="bench module names (e.g. bench_cli)")
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--no-openjarvis", action="store_true", help="skip installing OpenJarvis")
    parser.add_argument(
        "--smoke", action="store_true",
        help="every module once, one iteration, no OpenJarvis; fails only on a crash",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.smoke:
        args.quick = args.no_openjarvis = True
        if args.out == parser.get_default("out"):  # never over the committed results
            args.out = tempfile.mkdtemp(prefix="jarvis-bench-smoke-")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    oj_python, oj_error = None, "skipped"
    if not args.no_openjarvis:
        cache = Path(os.environ.get("JARVIS_BENCH_CACHE", ROOT / ".bench-venvs"))
        cache.mkdir(parents=True, exist_ok=True)
        oj_python, oj_error = ensure_openjarvis(cache)
    tmp = out / "tmp"
    tmp.mkdir(exist_ok=True)
    env = BenchEnv(sys.executable, tmp, args.quick, oj_python, oj_error, smoke=args.smoke)

    rows: list[Row] = []
    failures = 0
    for name in args.only or discover():
        print(f"== {name}", file=sys.stderr, flush=True)
        environ = dict(os.environ)
        began = time.perf_counter()
        try:
            module = importlib.import_module(f"benchmarks.{name}")
            new_rows = module.run(env)
        except Exception:
            failures += 1
            traceback.print_exc()
            rows.append(Row(name, float("nan"), "", passed=False, notes="benchmark crashed"))
            continue
        finally:
            # A module that points jarvis's directories elsewhere (bench_daemon) must
            # not move them for the next: the next would find no models or agents.
            os.environ.clear()
            os.environ.update(environ)
            print(f"   ({time.perf_counter() - began:.1f} s)", file=sys.stderr, flush=True)
        for row in new_rows:
            print(f"   {row.name}: {fmt(row.ours, row.unit)} vs {fmt(row.baseline, row.unit)}"
                  f" -> {row.passed}", file=sys.stderr, flush=True)  # fmt: skip
        rows.extend(new_rows)
    meta = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "openjarvis": (oj_python and OPENJARVIS_VERSION) or oj_error,
    }
    (out / "results.md").write_text(render_markdown(rows, meta))
    (out / "results.json").write_text(
        json.dumps({"meta": meta, "rows": [asdict(r) | {"ratio": r.ratio} for r in rows]}, indent=2)
    )
    print((out / "results.md").read_text())
    if args.smoke:
        return 1 if failures else 0
    failed = [r for r in rows if r.passed is False]
    return 1 if failed or failures else 0


if __name__ == "__main__":
    sys.exit(main())
