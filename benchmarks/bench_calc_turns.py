"""Wall time of a 3-turn calculator task on the catalog models, before and after:
the same task, the same model file, the orchestrator at temperature 0, run by two
versions of jarvis in fresh interpreters, alternating so drift hits both.

"Before" is a commit given with ``--before`` (extracted with ``git archive``), "after"
is this tree. Each run is one process: load the model, run the task, report the wall
time of the task (load excluded), the tokens generated per turn, and the answer.

    python -m benchmarks.bench_calc_turns --before COMMIT [--task chain|percent]
        [--runs 3] [--out DIR]

writes ``DIR/calc_turns.md`` and ``.json`` (``calc_turns_percent.*`` for ``percent``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchEnv, Row

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
#: The smoke run's model: the smallest, so that it checks the code, not the model.
SMOKE_MODEL = "smollm2-135m"
#: name -> (the task, its answer). ``chain``: two dependent calls, then the answer.
#: ``percent``: one call, which 0.5B writes again and again in its second reply until
#: the 512-token limit unless generation stops at the first complete call.
TASKS = {
    "chain": (
        "Use the calculator. First compute 1234 * 5678. Then add 4321 to that result. "
        "Then tell me the final number.",
        "7010973",
    ),
    "percent": ("What is 17.5% of 86420?", "15123.5"),
}

SCRIPT = r"""
import asyncio, json, sys, time
from jarvisd.agents import AgentRegistry
from jarvisd.engines import WrapperEngine
from jarvisd.engines._llamacpp import LlamaCppEngine
from jarvisd.tools import CalculatorTool

path, task, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])


class Tokens(WrapperEngine):
    def __init__(self, inner):
        super().__init__(inner)
        self.turns = []

    async def generate(self, messages, **kw):
        g = await super().generate(messages, **kw)
        self.turns.append(g.usage.completion_tokens)
        return g


async def main():
    inner = LlamaCppEngine(path, n_ctx=4096)
    await asyncio.to_thread(inner.load)
    engine = Tokens(inner)
    agent = AgentRegistry.create("orchestrator", engine, path, tools=[CalculatorTool()],
                                 temperature=0, max_tokens=max_tokens, max_turns=6)
    start = time.perf_counter()
    result = await agent.arun(task)
    wall = time.perf_counter() - start
    await inner.aclose()
    print(json.dumps({"wall_s": wall, "tokens": engine.turns, "answer": result.content,
                      "results": [r.content for r in result.tool_results]}))


asyncio.run(main())
"""


def _tree(commit: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "jarvisd"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _once(tree: Path, model_path: Path, task: str, max_tokens: int = 512) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(model_path), task, str(max_tokens)],
        capture_output=True, text=True, check=False, timeout=900,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"run failed: {proc.stderr[-1000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def measure(
    before: str | None,
    models: Sequence[str],
    runs: int,
    task: str = "chain",
    max_tokens: int = 512,
) -> dict[str, Any]:
    """``before`` None: this tree only (the harness's smoke run)."""
    from tests.conftest import real_model_path

    text, expected = TASKS[task]
    report: dict[str, Any] = {"before": before, "task": text, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"after": ROOT}
        if before is not None:
            trees = {"before": _tree(before, Path(tmp)), **trees}
        for model in models:
            path = real_model_path(model)
            done: dict[str, list[dict[str, Any]]] = {version: [] for version in trees}
            for _ in range(runs):
                for version, tree in trees.items():
                    done[version].append(_once(tree, path, text, max_tokens))
                    print(f"   {model} {version}: {done[version][-1]}", file=sys.stderr)
            report["models"][model] = {
                version: {
                    "median_wall_s": round(statistics.median(float(r["wall_s"]) for r in rs), 2),
                    "right": sum(expected in str(r["answer"]).replace(",", "") for r in rs),
                    "runs": rs,
                }
                for version, rs in done.items()
            }
    return report


def run(env: BenchEnv) -> list[Row]:
    """For the harness: before = where this tree left main (``git merge-base``). The
    smoke run: this tree only, the one-call task on the smallest model, once."""
    if env.smoke:
        report = measure(None, (SMOKE_MODEL,), 1, "percent", max_tokens=48)
        data = report["models"][SMOKE_MODEL]["after"]
        return [Row(f"1-call calculator task ({SMOKE_MODEL}), smoke", data["median_wall_s"], "s",
                    notes=f"right: {data['right']}/1")]  # fmt: skip
    base = subprocess.run(
        ["git", "-C", str(ROOT), "merge-base", "HEAD", "main"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    report = measure(base, MODELS, env.runs(3, 1))
    return [
        Row(f"3-turn calculator task ({model}), median", data["after"]["median_wall_s"], "s",
            data["before"]["median_wall_s"], f"main at {base[:9]}",
            notes=f"right: {data['after']['right']} vs {data['before']['right']}")
        for model, data in report["models"].items()
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the commit measured as before")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--task", choices=sorted(TASKS), default="chain")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    report = measure(args.before, args.models, args.runs, args.task)
    text, expected = TASKS[args.task]
    stem = "calc_turns" if args.task == "chain" else f"calc_turns_{args.task}"
    report["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1))
    lines = [
        f"# Calculator task ({args.task}): median wall time, before and after",
        "",
        f"{report['when']}; before = {args.before}; task: {text!r} (answer {expected}); "
        f"orchestrator, temperature 0, max 512 tokens a turn; model load excluded; "
        f"{args.runs} runs each, alternating.",
        "",
        "| model | before (median s) | after (median s) | after / before | right answers "
        "before | after | tokens per turn before | after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model, data in report["models"].items():
        b, a = data["before"], data["after"]
        lines.append(
            f"| {model} | {b['median_wall_s']} | {a['median_wall_s']} | "
            f"{a['median_wall_s'] / b['median_wall_s']:.2f} | {b['right']}/{args.runs} | "
            f"{a['right']}/{args.runs} | {b['runs'][0]['tokens']} | {a['runs'][0]['tokens']} |"
        )
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print((out / f"{stem}.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
