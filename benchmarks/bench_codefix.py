"""The codefix yardstick side by side: real bugs of the corpus
(``jarvisd/evals/codefix/corpus.toml``) fixed by four systems on the same model file,
served by ONE ``jarvis serve-model`` process (its OpenAI endpoint):

- ``jarvis native_openhands`` (one candidate) and ``jarvis native_openhands x3``
  (``--candidates 3``), and ``jarvis opencode``: ``jarvis code``'s own path
  (``jarvisd.evals.codefix.run_jarvis``: setup in the sandbox, ``--test`` with the
  project's whole suite, ``--rounds 3``), on the ``openai`` engine at serve-model;
- ``mini-swe-agent 2.4.6`` (PyPI ``mini-swe-agent==2.4.6``, in its own venv under
  ``~/.cache/jarvis-codefix``, never jarvis's): its own default scaffold, its model
  through litellm at serve-model's endpoint, its commands run in a container of the
  jarvis sandbox image (network off, the project's cached environment mounted
  read-only) on a copy of the bug's repository.

Every system gets the same bug report (``Bug.task``) and is judged the same way: its
change to the project's own source files, on a fresh copy of the bug, under the
project's whole suite in the sandbox. Results are appended one JSON line per bug and
system to ``DIR/codefix.jsonl`` as each finishes (a stopped run goes on where it
stopped); ``DIR/codefix.json`` and ``DIR/codefix.md`` are the table, with n per cell.

    python -m benchmarks.bench_codefix -m qwen2.5-coder-0.5b [--bugs N|IDS]
        [--systems native,cand3,opencode,mini] [--out DIR] [--port P]

Single candidates run at temperature 0 (greedy, repeatable); the three candidates at
``CANDIDATE_TEMPERATURE`` (greedy candidates would be one candidate three times).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchEnv, Row

ROOT = Path(__file__).resolve().parents[1]
MINI_VERSION = "2.4.6"
CANDIDATE_TEMPERATURE = 0.7
#: Per bug and system: the agent's wall-clock budget (the 1.5B model runs ~15 tok/s).
MAX_WALL_S = 600.0
#: mini-swe-agent's step limit (its default config has none: the budget stops it).
MINI_STEPS = 30
SYSTEMS = ("native", "cand3", "opencode", "mini")


def mini_venv() -> Path:
    from jarvisd.evals.codefix import cache_dir

    return cache_dir() / f"mini-swe-agent-{MINI_VERSION}"


def ensure_mini() -> Path:
    """mini-swe-agent in its own venv (installed once, with the host's pip config)."""
    venv = mini_venv()
    mini = venv / "bin" / "mini"
    if not mini.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q",
                        f"mini-swe-agent=={MINI_VERSION}"], check=True)  # fmt: skip
    return mini


class Server:
    """One ``jarvis serve-model`` for every system of the run; its output goes to
    ``log`` (appended)."""

    def __init__(self, models: Sequence[str], port: int, n_ctx: int, log: Path) -> None:
        self.argv = [sys.executable, "-m", "jarvisd", "serve-model", "--port", str(port),
                     "--n-ctx", str(n_ctx), *[w for m in models for w in ("-m", m)]]  # fmt: skip
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        # Another server already there would answer for ours (another model, other
        # clients' load): the rows would not be this model's.
        try:
            with urllib.request.urlopen(self.base_url + "/models", timeout=5):
                raise RuntimeError(f"something already answers at {self.base_url}: pick --port")
        except OSError:
            pass
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve-model exited ({self.proc.returncode}): see {self.log}")
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=5):
                    return self
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"serve-model did not answer at {self.base_url}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def jarvis_config(base_url: str, where: Path) -> Path:
    path = where / "jarvis.toml"
    path.write_text(f'[engine]\ndefault = "openai"\n\n[engine.openai]\n'
                    f'base_url = "{base_url}"\ntimeout = 900\n')  # fmt: skip
    return path


_MINI_CONFIG = """\
agent:
  step_limit: {steps}
  cost_limit: 0
environment:
  environment_class: docker
  image: {image}
  cwd: /testbed
  timeout: 120
  executable: {docker}
  run_args: {run_args}
  env: {env}
model:
  model_name: openai/{model}
  cost_tracking: ignore_errors
  model_kwargs:
    api_base: {base_url}
    api_key: none
    temperature: 0.0
"""


def run_mini(bug: Any, model: str, base_url: str, config: Any, work: Path) -> dict[str, Any]:
    """mini-swe-agent on a copy of ``bug``'s repository; the copy, after it."""
    import asyncio

    from jarvisd.code._job import _code_config
    from jarvisd.code._setup import plan_setup, prepare_toolchain
    from jarvisd.code._store import Workspace
    from jarvisd.evals.codefix import build_bug
    from jarvisd.evals.codefix._eval import bug_dir
    from jarvisd.sandbox import executor_for_backend

    repo = build_bug(bug, bug_dir(bug))
    tree = work / "testbed"
    shutil.copytree(repo.path, tree, symlinks=True)
    # The project's environment, as jarvis code's setup made it (cached by its path).
    plan = plan_setup(str(repo.path))
    ws = Workspace(id="mini", source=str(repo.path), kind="copy", path=str(repo.path),
                   git_dir="", branch="", base="", files=10_000)  # fmt: skip
    code_config = _code_config(config, ws)
    executor = executor_for_backend(config.sandbox.backend, code_config)
    env_path = ""
    if plan is not None:
        toolchain = asyncio.run(prepare_toolchain(plan, str(repo.path), code_config, executor,
                                                  project=str(repo.path)))  # fmt: skip
        env_path = toolchain.path
    pythonpath = "/testbed/src:/testbed" if (tree / "src").is_dir() else "/testbed"
    # As jarvis's sandbox: no network, no capabilities, bounded; the copy read-write.
    run_args = ["--rm", "--network", "none", "--cap-drop", "ALL", "--security-opt",
                "no-new-privileges", "--pids-limit", "512", "--memory", "2g", "--user", "0:0",
                "-v", f"{tree}:/testbed"]  # fmt: skip
    if env_path:
        run_args += ["-v", f"{env_path}:/opt/jarvis-env:ro"]
    env = {"PATH": "/opt/jarvis-env/bin:/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": pythonpath,
           "PAGER": "cat", "MANPAGER": "cat", "LESS": "-R", "PIP_PROGRESS_BAR": "off",
           "TQDM_DISABLE": "1"}  # fmt: skip
    cfg = work / "codefix-mini.yaml"  # not mini.yaml: -c looks in the cwd first
    cfg.write_text(_MINI_CONFIG.format(
        steps=MINI_STEPS, image=config.sandbox.image, docker=shutil.which("docker") or "docker",
        run_args=json.dumps(run_args), env=json.dumps(env), model=model, base_url=base_url,
    ))  # fmt: skip
    mini = ensure_mini()
    traj = work / "traj.json"
    task = bug.task() + f" Run the tests with: {bug.project.test}"
    argv = [str(mini), "-c", "mini.yaml", "-c", str(cfg), "-t", task, "-y",
            "--exit-immediately", "-o", str(traj)]  # fmt: skip
    started = time.perf_counter()
    env_vars = {**os.environ, "MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors",
                "LITELLM_LOG": "ERROR", "DOCKER_HOST": os.environ.get("DOCKER_HOST", "")}  # fmt: skip
    try:
        done = subprocess.run(argv, cwd=work, env=env_vars, capture_output=True, text=True,
                              timeout=MAX_WALL_S + 120, stdin=subprocess.DEVNULL)  # fmt: skip
        note = "" if done.returncode == 0 else done.stderr[-300:]
    except subprocess.TimeoutExpired:
        note = "timeout"
    wall = time.perf_counter() - started
    prompt = completion = turns = 0
    if traj.is_file():
        try:
            data = json.loads(traj.read_text())
            for message in data.get("messages") or ():
                response = (message.get("extra") or {}).get("response")
                if not isinstance(response, dict):
                    continue
                usage = response.get("usage") or {}
                prompt += int(usage.get("prompt_tokens") or 0)
                completion += int(usage.get("completion_tokens") or 0)
                turns += 1  # one model call
        except (OSError, ValueError, AttributeError):
            pass
    return {"repo": repo, "tree": tree, "wall_s": wall, "prompt_tokens": prompt,
            "completion_tokens": completion, "turns": turns, "note": note}  # fmt: skip


def mini_runner(model: str, base_url: str, config: Any) -> Callable[[Any, Any], Any]:
    import asyncio

    from jarvisd.evals.codefix._eval import BugResult, judge

    def run_one(bug: Any, rc: Any) -> Any:
        result = BugResult(bug.id, bug.project.name, rc.name, rc.model)
        with tempfile.TemporaryDirectory(prefix="codefix-mini-") as tmp:
            got = run_mini(bug, model, base_url, config, Path(tmp))
            result.wall_s = round(got["wall_s"], 3)
            result.prompt_tokens, result.completion_tokens = (
                got["prompt_tokens"],
                got["completion_tokens"],
            )
            result.turns = result.calls = got["turns"]
            result.failure = got["note"][:200]
            # Its trajectory, kept to see what it did (the work directory goes).
            traj = Path(tmp) / "traj.json"
            if traj.is_file():
                from jarvisd.evals.codefix import cache_dir

                kept = cache_dir() / "mini-trajectories" / f"{model}-{bug.id}.json"
                kept.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(traj, kept)
            result.verdict, result.dropped = asyncio.run(judge(got["repo"], got["tree"], config))
        result.fixed = result.verdict == "passed"
        return result

    return run_one


def commit() -> str:
    """The commit of jarvis measured ("+" when its tree has changes), or ""."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "jarvisd", "runners"],
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("+" if dirty.strip() else "")  # fmt: skip


def measure(model: str, bugs: str, systems: Sequence[str], out: Path, port: int,
            n_ctx: int, again: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    from jarvisd._config import load_config
    from jarvisd.evals.codefix import load_corpus
    from jarvisd.evals.codefix._eval import RunConfig, run_eval

    corpus = load_corpus()
    limit = int(bugs) if bugs.isdigit() else None
    chosen = corpus.select("" if limit is not None else bugs, limit)
    configs = {
        "native": RunConfig(model=model, engine="openai", temperature=0.0, max_wall=MAX_WALL_S),
        "cand3": RunConfig(model=model, engine="openai", candidates=3,
                           temperature=CANDIDATE_TEMPERATURE, max_wall=MAX_WALL_S),
        "opencode": RunConfig(agent="opencode", model=model, engine="openai", temperature=0.0,
                              max_wall=MAX_WALL_S),
        "mini": RunConfig(agent="mini-swe-agent", model=model, label=f"mini-swe-agent {MINI_VERSION}"),
    }  # fmt: skip
    chosen_configs = [configs[s] for s in systems]
    results = out / "codefix.jsonl"

    def progress(line: str) -> None:
        print(f"codefix {model}: {line}", file=sys.stderr, flush=True)

    from jarvisd.evals.codefix import cache_dir

    server = Server([model], port, n_ctx, cache_dir() / "serve-model.log")
    with server, tempfile.TemporaryDirectory() as tmp:
        os.environ["JARVIS_CONFIG"] = str(jarvis_config(server.base_url, Path(tmp)))
        config = load_config()
        mini = mini_runner(model, server.base_url, config)
        from jarvisd.evals.codefix._eval import run_jarvis

        def dispatch(bug: Any, rc: Any) -> Any:
            if rc.agent == "mini-swe-agent":
                return mini(bug, rc)
            return run_jarvis(bug, rc, config)

        return run_eval(chosen, chosen_configs, config, results=results, progress=progress,
                        runner=dispatch, again=again, tags={"commit": commit()})  # fmt: skip


def write_table(out: Path) -> dict[str, Any]:
    """``codefix.json`` and ``codefix.md`` from ``codefix.jsonl`` (every row so far)."""
    from jarvisd.evals.codefix._eval import latest, load_results, summarize

    rows = load_results(out / "codefix.jsonl")
    # A bug run again (--again, after a change to jarvis) counts by its last row; the
    # rows before it stay in the per-bug table, marked.
    current = latest(rows)
    summary = summarize(current)
    report = {"summary": summary, "results": rows}
    (out / "codefix.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "# codefix: real bugs fixed, side by side on one serve-model",
        "",
        "Each bug: one mutation of a real PyPI project (jarvisd/evals/codefix/corpus.toml);",
        "fixed when the project's whole suite passes in the sandbox on the change to its own",
        "source. n is the number of bugs run in that cell; the same bugs for every system",
        "of a model only where n is equal. A bug run again (`--again`, after a change to",
        "jarvis) counts by its last row.",
        "",
        "| model | system | n | fixed | fix rate | wall time (s, total) | tokens (total) | harness errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in sorted(summary, key=lambda s: (s["model"], s["config"])):
        lines.append(
            f"| {s['model']} | {s['config']} | {s['n']} | {s['fixed']} | "
            f"{100 * s['fix_rate']:.0f}% | {s['wall_s']:.0f} | "
            f"{s['prompt_tokens'] + s['completion_tokens']} | {s['errors']} |"
        )
    lines += ["", "Per bug (model: the seconds of the model's replies, and how many; setup and",
              "tests: jarvis's own phases; load: the machine's 1-minute load average at the",
              "start; blank where the row did not record them; superseded: run again later):",
              "",
              "| model | bug | system | verdict | wall (s) | model (s, replies) | setup + tests (s) "
              "| tokens | load |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    last = {(r["bug"], r["config"], r.get("model", "")): i for i, r in enumerate(rows)}
    for i, r in enumerate(rows):
        word = (
            "fixed" if r["fixed"] else (f"error: {r['error'][:60]}" if r["error"] else r["verdict"])
        )
        if last[(r["bug"], r["config"], r.get("model", ""))] != i:
            word += " (superseded)"
        model_s = f"{r['model_s']:.0f} ({r['calls']})" if r.get("calls") else ""
        phases = f"{r['setup_s']:.0f} + {r['tests_s']:.0f}" if r.get("tests_s") else ""
        lines.append(f"| {r['model']} | {r['bug']} | {r['config']} | {word} | "
                     f"{r['wall_s']:.0f} | {model_s} | {phases} | "
                     f"{r['prompt_tokens'] + r['completion_tokens']} | "
                     f"{r['load'] if r.get('load') else ''} |")  # fmt: skip
    (out / "codefix.md").write_text("\n".join(lines) + "\n")
    return report


def run(env: BenchEnv) -> list[Row]:
    """For the harness: the table of the results measured so far (the runs themselves
    take hours on 2 cores: ``python -m benchmarks.bench_codefix``)."""
    from jarvisd.evals.codefix import load_corpus

    corpus = load_corpus()
    out = ROOT / "benchmarks" / "results"
    summary = write_table(out)["summary"] if not env.smoke else []
    if env.smoke:
        from jarvisd.evals.codefix._eval import latest, load_results, summarize

        summary = summarize(latest(load_results(out / "codefix.jsonl")))
    rows = [Row(f"codefix corpus: bugs (projects {len({b.project.name for b in corpus.bugs})})",
                float(len(corpus.bugs)), "bugs", notes="informational")]  # fmt: skip
    for s in summary:
        rows.append(Row(f"codefix fix rate, {s['config']} ({s['model']}, n={s['n']})",
                        100 * s["fix_rate"], "%", notes="measured earlier, see codefix.md"))  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", required=True, help="catalog model to serve")
    parser.add_argument("--bugs", default="", help="N (spread over projects) or ids")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated, of {', '.join(SYSTEMS)}")  # fmt: skip
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--port", type=int, default=18434)
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--again", action="store_true",
                        help="run bugs the results already hold again (after a change to "
                             "jarvis); the new row counts")  # fmt: skip
    args = parser.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown systems {unknown}; of {SYSTEMS}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    measure(args.model, args.bugs, systems, out, args.port, args.n_ctx, args.again)
    report = write_table(out)
    for s in report["summary"]:
        print(f"{s['model']:<22} {s['config']:<34} n={s['n']:<3} fixed {s['fixed']} "
              f"({100 * s['fix_rate']:.0f}%)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
