"""BFCL (Berkeley Function Calling Leaderboard) AST categories on the catalog models,
three ways side by side in one run, all scored by bfcl-eval's own checker:

- **jarvis**: the real tool-call path (``jarvisd.evals``: the embedded engine, the
  orchestrator's dialect with calls recovered from text, argument repair, schema check);
- **llama-cpp-python**: the same model file through llama-cpp-python's own tool calling
  (``chat_format="chatml-function-calling"``, ``tool_choice="auto"``), without jarvis;
- **OpenJarvis 1.0.4**: its orchestrator (function-calling mode, its own venv under
  ~/.cache/jarvis) on the same model through ``jarvis serve-model``.

Every case: temperature 0, at most 512 new tokens, the model's first turn only (the
functions are never run). llama-cpp-python runs in a child process, so a case that it
keeps generating past ``CASE_SECONDS``, or whose process dies, is stopped and scored
wrong. Cases are drawn with a fixed seed, ``--limit`` per category (the default fits CI
time); ``--full`` runs the whole sets (hours on 2 cores).

    python -m benchmarks.bench_bfcl [--limit N | --full] [--models M ...] [--out DIR]

writes ``DIR/bfcl.md`` and ``DIR/bfcl.json``. The leaderboard publishes no figure for
Qwen2.5-Coder-0.5B or 1.5B (bfcl-eval 2026.3.23 lists neither): the column says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import OPENJARVIS_VERSION, BenchEnv, Row, ensure_openjarvis

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
#: The smoke run's model: the smallest, so that it checks the code, not the model.
SMOKE_MODEL = "smollm2-135m"
#: ...and its replies' length: enough for a call, not for a model that rambles.
SMOKE_TOKENS = 48
#: Cases per category in the CI-sized run: 5 categories x 3 systems x 2 models.
DEFAULT_LIMIT = 2
SEED = 17
MAX_TOKENS = 512
#: The leaderboard's published overall figure per model, where one exists.
LEADERBOARD: dict[str, str] = {}
SYSTEMS = ("jarvis", "llama-cpp-python", "openjarvis")
#: Seconds one llama-cpp-python case may take. Once its chatml-function-calling has
#: written a call it generates with no token limit (llama-cpp-python 0.3.36), and a model
#: that goes on writing calls runs to the context window: one case sat 25 minutes. A
#: case past this limit is stopped (its process killed) and scored wrong.
CASE_SECONDS = 300
#: The call a case without a reply (stopped, or its process gone) is scored with: no
#: function has this name, and irrelevance counts any call as wrong.
NO_REPLY = "<no reply>"

OPENJARVIS_SCRIPT = r"""
import json, sys
from openjarvis.agents.orchestrator import OrchestratorAgent
from openjarvis.core.events import EventBus
from openjarvis.core.types import ToolResult
from openjarvis.engine.ollama import OllamaEngine
from openjarvis.tools._stubs import BaseTool, ToolSpec

url, model, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
engine = OllamaEngine(host=url, timeout=600)


class Recorder(BaseTool):
    def __init__(self, fn, sink):
        self.tool_id = fn["name"]
        self._spec = ToolSpec(fn["name"], fn.get("description", ""), fn["parameters"])
        self._sink = sink

    @property
    def spec(self):
        return self._spec

    def execute(self, **params):
        self._sink.append({self._spec.name: params})
        return ToolResult(tool_name=self._spec.name, content="ok")


for line in sys.stdin:
    case = json.loads(line)
    made = []
    tools = [Recorder(fn, made) for fn in case["functions"]]
    agent = OrchestratorAgent(engine, model, tools=tools, bus=EventBus(), max_turns=1,
                              temperature=0.0, max_tokens=max_tokens)
    try:
        agent.run(case["question"])
        error = ""
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
    print(json.dumps({"id": case["id"], "calls": made, "error": error}), flush=True)
"""


def _cases(category: str, limit: int | None) -> list[Any]:
    from jarvisd.evals import load_cases

    return load_cases(category, limit, SEED)


def _question(case: Any) -> str:
    return "\n\n".join(m.content for m in case.messages if m.role.value == "user")


# -- the three systems ---------------------------------------------------------------


def _progress(i: int, n: int) -> None:
    print(f"     case {i}/{n} at {time.strftime('%H:%M:%S')}", file=sys.stderr, flush=True)


def run_jarvis(
    model_path: Path, cases: Sequence[Any], max_tokens: int = MAX_TOKENS
) -> dict[str, list[Any]]:
    from jarvisd._errors import JarvisError
    from jarvisd.engines._llamacpp import LlamaCppEngine
    from jarvisd.evals import jarvis_calls

    async def go() -> dict[str, list[Any]]:
        engine = LlamaCppEngine(str(model_path), n_ctx=4096)
        made: dict[str, list[Any]] = {}
        try:
            for i, case in enumerate(cases, 1):
                _progress(i, len(cases))
                try:
                    made[case.id] = await jarvis_calls(engine, "", case, max_tokens=max_tokens)
                except JarvisError as exc:  # e.g. a prompt longer than the window: no call
                    print(f"   {case.id}: {exc}", file=sys.stderr)
                    made[case.id] = []
            return made
        finally:
            await engine.aclose()

    return asyncio.run(go())


def _llama_cpp_worker(model_path: str) -> None:
    """The llama-cpp-python side, in its own process so a case can be stopped: one JSON
    request per stdin line (``messages``, ``tools``), one JSON reply per line."""
    import llama_cpp

    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything llama.cpp prints goes to stderr, never into the replies
    llama = llama_cpp.Llama(
        model_path=model_path, n_ctx=4096, n_threads=os.cpu_count() or 1,
        chat_format="chatml-function-calling", verbose=False,
    )  # fmt: skip
    for line in sys.stdin:
        request = json.loads(line)
        calls: list[Any] = []
        error = ""
        try:
            reply = llama.create_chat_completion(
                messages=request["messages"], tools=request["tools"], tool_choice="auto",
                temperature=0, max_tokens=request.get("max_tokens", MAX_TOKENS),
            )  # fmt: skip
        except ValueError as exc:  # a prompt longer than the window: no call
            error = str(exc)[:300]
        else:
            for call in reply["choices"][0]["message"].get("tool_calls") or ():  # type: ignore[index]
                try:
                    arguments = json.loads(call["function"]["arguments"] or "{}")
                except ValueError:
                    arguments = None
                if isinstance(arguments, dict):
                    calls.append({call["function"]["name"]: arguments})
        replies.write(json.dumps({"calls": calls, "error": error}) + "\n")
        replies.flush()


class _Worker:
    """A ``_llama_cpp_worker`` process, started on first use and again after a kill."""

    def __init__(self, model_path: Path) -> None:
        self._argv = [sys.executable, "-m", "benchmarks.bench_bfcl", "--llama-cpp-worker",
                      str(model_path)]  # fmt: skip
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str] = queue.Queue()

    def ask(self, request: dict[str, Any], seconds: float) -> dict[str, Any] | str:
        """The reply, or why there is none: no reply within ``seconds`` (the process is
        killed) or the process gone (llama.cpp can abort a process)."""
        if self._proc is None:
            self._proc = subprocess.Popen(
                self._argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            self._lines = queue.Queue()  # a killed process's reader never feeds this one
            threading.Thread(target=_read_lines, args=(self._proc.stdout, self._lines),
                             daemon=True).start()  # fmt: skip
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._lines.get(timeout=seconds)
        except queue.Empty:
            self.close()
            return f"stopped at {seconds} s"
        except OSError:  # the process was gone before the request
            line = ""
        if not line:
            code = self.close()
            return f"the llama-cpp-python process exited ({code})"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> int | None:
        """Kill the process if it runs; its exit code, if there was one."""
        if self._proc is None:
            return None
        self._proc.kill()
        code = self._proc.wait()
        self._proc = None
        return code


def _read_lines(out: Any, into: queue.Queue[str]) -> None:
    """Every line of ``out`` into ``into``, then "" for its end."""
    for line in out:
        into.put(line)
    into.put("")


def run_llama_cpp(
    model_path: Path, cases: Sequence[Any], max_tokens: int = MAX_TOKENS
) -> tuple[dict[str, list[Any]], list[str]]:
    """llama-cpp-python's own tool calling, each case stopped at ``CASE_SECONDS``."""
    from jarvisd.evals import tool_specs

    worker = _Worker(model_path)
    made: dict[str, list[Any]] = {}
    errors = []
    try:
        for i, case in enumerate(cases, 1):
            _progress(i, len(cases))
            request = {
                "messages": [{"role": m.role.value, "content": m.content} for m in case.messages],
                "tools": [s.to_openai() for s in tool_specs(case.functions)],
                "max_tokens": max_tokens,
            }
            reply = worker.ask(request, CASE_SECONDS)
            if isinstance(reply, str):
                made[case.id] = [{NO_REPLY: {}}]
                errors.append(f"{case.id}: {reply}, scored wrong")
                continue
            made[case.id] = reply["calls"]
            if reply["error"]:
                errors.append(f"{case.id}: {reply['error']}")
    finally:
        worker.close()
    return made, errors


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_openjarvis(
    env: BenchEnv, model: str, cases: Sequence[Any]
) -> tuple[dict[str, list[Any]], list[str]]:
    """OpenJarvis's orchestrator against ``jarvis serve-model`` serving ``model``."""
    if env.openjarvis_python is None:
        return {}, [f"OpenJarvis unavailable: {env.openjarvis_error}"]
    port = _free_port()
    server = subprocess.Popen(
        [env.jarvis_bin(), "serve-model", "--port", str(port), "--model", model],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/api/version", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    detail = server.stderr.read()[-500:] if server.stderr else ""
                    raise RuntimeError(f"serve-model did not start: {detail}") from None
                time.sleep(0.2)
        lines = "".join(
            json.dumps({"id": c.id, "question": _question(c), "functions": list(c.functions)})
            + "\n"
            for c in cases
        )
        proc = subprocess.run(
            [env.openjarvis_python, "-c", OPENJARVIS_SCRIPT, url, model, str(MAX_TOKENS)],
            input=lines, capture_output=True, text=True, timeout=3600, check=False,
        )  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)
    made: dict[str, list[Any]] = {}
    errors = []
    for line in proc.stdout.splitlines():
        row = json.loads(line)
        made[row["id"]] = row["calls"]
        if row["error"]:
            errors.append(f"{row['id']}: {row['error']}")
    if proc.returncode != 0:
        errors.append(f"OpenJarvis exited {proc.returncode}: {proc.stderr[-300:]}")
    return made, errors


# -- the run -------------------------------------------------------------------------


def measure(
    env: BenchEnv,
    models: Sequence[str],
    limit: int | None,
    categories: Sequence[str],
    done: Callable[[dict[str, Any]], None] | None = None,
    max_tokens: int = MAX_TOKENS,
    systems: Sequence[str] = SYSTEMS,
) -> dict[str, Any]:
    """Accuracy per model, system and category; ``done`` is given the report so far
    after each system of each model (a long run keeps what it measured if stopped)."""
    from tests.conftest import real_model_path

    report: dict[str, Any] = {"models": {}, "limit": limit, "seed": SEED}
    cases = [c for category in categories for c in _cases(category, limit)]
    for model in models:
        path = real_model_path(model)
        made: dict[str, dict[str, list[Any]]] = {}
        seconds: dict[str, float] = {}
        errors: list[str] = []
        for system in systems:
            print(f"   {model}: {system} on {len(cases)} cases", file=sys.stderr, flush=True)
            start = time.perf_counter()
            failed: list[str] = []
            if system == "jarvis":
                made[system] = run_jarvis(path, cases, max_tokens)
            elif system == "llama-cpp-python":
                made[system], failed = run_llama_cpp(path, cases, max_tokens)
            else:
                try:
                    made[system], failed = run_openjarvis(env, model, cases)
                except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                    made[system], failed = {}, [f"run failed: {exc}"]
            seconds[system] = round(time.perf_counter() - start, 1)
            errors += [f"{system}: {error}" for error in failed]
            report["models"][model] = _summary(model, cases, categories, made, seconds, errors)
            if done is not None:  # after each system: a stopped run keeps what it measured
                done(report)
    return report


def _summary(
    model: str,
    cases: Sequence[Any],
    categories: Sequence[str],
    made: dict[str, dict[str, list[Any]]],
    seconds: dict[str, float],
    errors: list[str],
) -> dict[str, Any]:
    """One model's accuracy per category and system (None: the system was not run)."""
    from jarvisd.evals import score_case

    table: dict[str, dict[str, Any]] = {}
    for category in categories:
        of = [c for c in cases if c.category == category]
        table[category] = {
            system: sum(score_case(c, made[system].get(c.id, []), model) for c in of) / len(of)
            if made.get(system)
            else None
            for system in SYSTEMS
        }
        table[category]["n"] = len(of)
    return {
        "accuracy": table,
        "seconds": seconds,
        "leaderboard": LEADERBOARD.get(model, "none published"),
        "errors": errors[:40],
        "calls": made,
    }


def render(report: dict[str, Any], meta: dict[str, str]) -> str:
    limit = report["limit"]
    lines = [
        "# BFCL (AST categories), side by side",
        "",
        f"{meta['when']}; {meta['machine']}. bfcl-eval 2026.3.23's checker; "
        + (f"{limit} cases per category drawn with seed {report['seed']}" if limit else "full sets")
        + f"; temperature 0, first turn, at most {MAX_TOKENS} new tokens. "
        f"OpenJarvis {OPENJARVIS_VERSION} through `jarvis serve-model`. A llama-cpp-python "
        f"case still generating after {CASE_SECONDS} s is stopped and scored wrong.",
        "",
        "| model | category | n | jarvis | llama-cpp-python (chatml-function-calling) "
        "| OpenJarvis | leaderboard |",
        "|---|---|---|---|---|---|---|",
    ]
    for model, data in report["models"].items():
        for category, row in data["accuracy"].items():
            cells = ["-" if row[s] is None else f"{100 * row[s]:.0f}%" for s in SYSTEMS]
            lines.append(
                f"| {model} | {category} | {row['n']} | {' | '.join(cells)} | "
                f"{data['leaderboard']} |"
            )
    lines.append("")
    for model, data in report["models"].items():
        secs = ", ".join(f"{s} {v} s" for s, v in data["seconds"].items())
        lines.append(f"- {model}: wall time {secs}.")
        for error in data["errors"]:
            lines.append(f"  - {error}")
    return "\n".join(lines) + "\n"


def run(env: BenchEnv) -> list[Row]:
    """For the harness: the CI-sized run, one row per model and category."""
    from jarvisd.evals import CATEGORIES

    if env.smoke:  # one case, the smallest model, jarvis alone: does the module still run?
        report = measure(env, (SMOKE_MODEL,), 1, CATEGORIES[:1], max_tokens=SMOKE_TOKENS,
                         systems=("jarvis",))  # fmt: skip
    else:
        report = measure(env, MODELS, 2 if env.quick else DEFAULT_LIMIT, CATEGORIES)
    rows = []
    for model, data in report["models"].items():
        for category, row in data["accuracy"].items():
            oj, base = row["openjarvis"], row["llama-cpp-python"]
            rows.append(Row(
                f"BFCL {category} accuracy ({model}, n={row['n']})", 100 * row["jarvis"], "%",
                None if base is None else 100 * base, "llama-cpp-python tool calling",
                notes=f"OpenJarvis {'-' if oj is None else f'{100 * oj:.0f}%'}; "
                f"leaderboard: {data['leaderboard']}",
            ))  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    from jarvisd.evals import CATEGORIES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="cases per category")
    parser.add_argument("--full", action="store_true", help="the whole sets (hours)")
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--categories", nargs="*", default=list(CATEGORIES))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--llama-cpp-worker", metavar="MODEL_FILE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.llama_cpp_worker:
        _llama_cpp_worker(args.llama_cpp_worker)
        return 0
    cache = Path(os.environ.get("JARVIS_BENCH_CACHE", Path.home() / ".cache" / "jarvis"))
    oj_python, oj_error = ensure_openjarvis(cache)
    out = Path(args.out)
    env = BenchEnv(sys.executable, out, False, oj_python, oj_error)
    import platform

    meta = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    out.mkdir(parents=True, exist_ok=True)

    def write(report: dict[str, Any]) -> None:
        (out / "bfcl.json").write_text(json.dumps({"meta": meta, **report}, indent=1, default=str))
        (out / "bfcl.md").write_text(render(report, meta))

    write(measure(env, args.models, None if args.full else args.limit, args.categories, write))
    print((out / "bfcl.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
