"""Each bug of the corpus through the real ``jarvis code`` path, judged by the whole
suite in the sandbox.

Per bug: the project with the bug is made afresh (one commit, a clean tree); a
workspace (or a group of candidates) is prepared as ``jarvis code PATH TASK --test
CMD`` prepares it, with the bug report as the task and the project's whole suite as
the test command; the run is the CLI's own (``LocalHost``: sandboxed setup, the test
loop, ``--rounds``). Then the judge: the change the run leaves (the best candidate's)
to the project's own source files only, on a fresh copy of the bug's tree, and the
whole suite run in the sandbox: the bug is fixed when it passes. A change to the
tests, a conftest or a new file is left out, and said so.

Results go one JSON line per bug and configuration, appended as each finishes, so a
run that stops is still a table and the next run goes on where it stopped.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._build import BugRepo, build_bug
from ._check import fixed_tree, run_suite
from ._corpus import Bug

if TYPE_CHECKING:
    from ..._config import Config
    from ...engines import Engine

__all__ = ["BugResult", "RunConfig", "load_results", "run_eval", "run_jarvis", "summarize"]


@dataclass(frozen=True, slots=True)
class RunConfig:
    """One column of the table: an agent, how many candidates, the model."""

    agent: str = "native_openhands"
    candidates: int = 1
    model: str = ""
    engine: str | None = None
    temperature: float | None = None
    rounds: int = 3
    max_wall: float | None = None
    max_turns: int | None = None
    #: The column's name when it is not jarvis's (a baseline run by its own runner).
    label: str = ""

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        more = f" x{self.candidates}" if self.candidates > 1 else ""
        return f"jarvis {self.agent}{more}"


@dataclass(slots=True)
class BugResult:
    bug: str
    project: str
    config: str
    model: str
    fixed: bool = False
    #: passed / failed / test_error: the judge's suite; "no_change": nothing to judge.
    verdict: str = ""
    wall_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    turns: int = 0
    failure: str = ""  # the run's failure code, or ""
    #: Where the wall time went: the setup, the test runs, the model's replies (the
    #: sum of their latencies) and how many replies it gave.
    setup_s: float = 0.0
    tests_s: float = 0.0
    model_s: float = 0.0
    calls: int = 0
    dropped: list[str] = field(default_factory=list)  # changed files the judge left out
    error: str = ""  # the harness could not run it
    #: The machine's load (1-minute average) when the run started: the model's seconds
    #: a reply depend on it (the machines are shared).
    load: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def bug_dir(bug: Bug) -> Path:
    """Where a bug's repository is made: one place per bug (the setup's environment,
    cached by the project's path, is made once for all runs on it), in jarvis's cache
    (``$JARVIS_CACHE_DIR``) beside those environments."""
    from ..._paths import paths

    return paths().cache / "codefix" / bug.id


async def judge(
    repo: BugRepo, tree: Path, config: Config, passed_there: bool = False
) -> tuple[str, list[str]]:
    """The judge's verdict on ``tree`` (the agent's copy of the project): its changes
    to the project's own source files, on the bug's tree, under the whole suite.
    ``passed_there``: the whole suite passed in the sandbox on ``tree`` itself (jarvis
    code's last test run); when nothing of ``tree`` is left out, the judged tree is
    ``tree`` and the suite is not run again."""
    with tempfile.TemporaryDirectory(prefix="codefix-judge-") as tmp:
        dest, dropped = fixed_tree(repo, tree, Path(tmp) / "tree")
        if dest is None:
            return "no_change", dropped
        if passed_there and not dropped:
            return "passed", dropped
        result = await run_suite(dest, repo.bug.project.test, config, str(repo.path))
    return result.verdict, dropped


def run_jarvis(
    bug: Bug, run_config: RunConfig, config: Config, engine: Engine | None = None
) -> BugResult:
    """``bug`` through ``jarvis code`` as ``run_config`` says, judged."""
    from ..._events import Event, EventType
    from ..._paths import paths
    from ..._runcontext import RunContext
    from ...code import CodeStore, discard, prepare
    from ...code._candidates import group_of, prepare_group
    from ...runs import AgentSpec, LocalHost

    result = BugResult(bug.id, bug.project.name, run_config.name, run_config.model)
    started = time.perf_counter()
    repo = build_bug(bug, bug_dir(bug))
    store = CodeStore(paths().state / "code.db")
    task, test = bug.task(), bug.project.test
    if run_config.candidates > 1:
        ws = prepare_group(
            str(repo.path),
            store=store,
            state_dir=paths().state,
            task=task,
            agents=[run_config.agent] * run_config.candidates,
            test=test,
            rounds=run_config.rounds,
        )
        members = group_of(store, ws)
    else:
        ws = prepare(
            str(repo.path),
            store=store,
            state_dir=paths().state,
            task=task,
            agent=run_config.agent,
            test=test,
            rounds=run_config.rounds,
        )
        members = [ws]
    try:
        spec = AgentSpec(
            input=task,
            agent=run_config.agent,
            engine=run_config.engine,
            model=run_config.model,
            temperature=run_config.temperature,
            max_turns=run_config.max_turns,
            max_wall=run_config.max_wall,
            workspace=ws.id,
        ).at_edge()
        context = RunContext()
        replies: list[float] = []

        def on_reply(event: Event) -> None:
            replies.append(float(event.data.get("latency_s") or 0.0))

        context.bus.subscribe(on_reply, EventType.INFERENCE_END)
        outcome = LocalHost(config, engine).run(spec, context)
        result.model_s, result.calls = round(sum(replies), 3), len(replies)
        result.wall_s = round(time.perf_counter() - started, 3)
        result.prompt_tokens = outcome.usage.prompt_tokens
        result.completion_tokens = outcome.usage.completion_tokens
        result.turns = outcome.turns
        if outcome.failure is not None:
            result.failure = f"{outcome.failure.code}: {outcome.failure.message}"[:300]
        code = outcome.metadata.get("code")
        best = str(code.get("workspace") or ws.id) if isinstance(code, Mapping) else ws.id
        chosen = store.get(best)
        result.setup_s, result.tests_s = _phases(chosen.outcome)
        after = chosen.outcome.get("test_after") or {}
        passed_there = after.get("passed") is True and after.get("command") == test
        result.verdict, result.dropped = asyncio.run(
            judge(repo, Path(chosen.path), config, passed_there)
        )
        result.fixed = result.verdict == "passed"
    finally:
        for member in members:
            try:
                discard(store.get(member.id), store, paths().state)
            except Exception:  # a leftover workspace is not the result
                pass
        store.close()
    return result


def _phases(record: Mapping[str, Any]) -> tuple[float, float]:
    """The seconds a code run's record says its setup and its test runs took."""

    def seconds(part: object) -> float:
        value = part.get("duration_s") if isinstance(part, Mapping) else None
        return float(value) if isinstance(value, int | float) else 0.0

    tests = seconds(record.get("test_before"))
    for entry in record.get("rounds") or ():
        tests += seconds(entry.get("test") if isinstance(entry, Mapping) else None)
    return round(seconds(record.get("setup")), 3), round(tests, 3)


def load_results(path: Path) -> list[dict[str, Any]]:
    """The results file's lines (a line cut by a crash is skipped)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text("utf-8").splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "bug" in data and "config" in data:
            out.append(data)
    return out


def run_eval(
    bugs: Sequence[Bug],
    configs: Sequence[RunConfig],
    config: Config,
    *,
    results: Path | None = None,
    engine: Engine | None = None,
    progress: Callable[[str], None] = lambda line: None,
    runner: Callable[[Bug, RunConfig], BugResult] | None = None,
    again: bool = False,
    tags: Mapping[str, object] | None = None,
) -> list[dict[str, Any]]:
    """Every bug under every configuration (bug by bug: each bug's environment is made
    once), skipping what ``results`` already holds (``again``: run it again, after a
    change to the scaffold; the new row supersedes the old, see :func:`latest`); each
    result is appended to it as it finishes. Returns all results of these bugs and
    configurations. ``tags`` are added to each row (the bench's: the commit measured)."""
    done = (
        {(r["bug"], r["config"], r.get("model", "")): r for r in load_results(results)}
        if results is not None and not again
        else {}
    )
    run_one = runner or (lambda bug, rc: run_jarvis(bug, rc, config, engine))
    total = len(bugs) * len(configs)
    count = 0
    out: list[dict[str, Any]] = []
    for bug in bugs:
        for rc in configs:
            count += 1
            key = (bug.id, rc.name, rc.model)
            if key in done:
                out.append(done[key])
                progress(f"[{count}/{total}] {bug.id} / {rc.name}: done before")
                continue
            progress(f"[{count}/{total}] {bug.id} / {rc.name} ...")
            load = round(os.getloadavg()[0], 2)
            try:
                result = run_one(bug, rc).to_dict()
            except Exception as exc:
                result = BugResult(
                    bug.id,
                    bug.project.name,
                    rc.name,
                    rc.model,
                    error=f"{type(exc).__name__}: {exc}"[:500],
                ).to_dict()
            result["load"] = load
            result.update(tags or {})
            out.append(result)
            if results is not None:
                results.parent.mkdir(parents=True, exist_ok=True)
                with results.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(result) + "\n")
            word = (
                "FIXED" if result["fixed"] else (result["error"] and "error") or result["verdict"]
            )
            progress(f"[{count}/{total}] {bug.id} / {rc.name}: {word} ({result['wall_s']:.0f} s)")
    return out


def latest(results: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Of rows for the same bug, configuration and model, the last (a run again after a
    change to the scaffold supersedes the one before), in the order of first rows."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in results:
        rows[(r["bug"], r["config"], r.get("model", ""))] = dict(r)
    return list(rows.values())


def summarize(results: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (configuration, model): n, fixed, fix rate, wall time and tokens."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in results:
        row = rows.setdefault(
            (r["config"], r.get("model", "")),
            {
                "config": r["config"],
                "model": r.get("model", ""),
                "n": 0,
                "fixed": 0,
                "errors": 0,
                "wall_s": 0.0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
            },
        )
        row["n"] += 1
        row["fixed"] += bool(r.get("fixed"))
        row["errors"] += bool(r.get("error"))
        row["wall_s"] += float(r.get("wall_s") or 0)
        row["prompt_tokens"] += int(r.get("prompt_tokens") or 0)
        row["completion_tokens"] += int(r.get("completion_tokens") or 0)
    for row in rows.values():
        row["fix_rate"] = row["fixed"] / row["n"] if row["n"] else 0.0
        row["wall_s"] = round(row["wall_s"], 1)
    return list(rows.values())
