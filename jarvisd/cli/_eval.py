"""``jarvis eval``: how well a model and engine call tools, and fix real bugs."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from ..evals import CategoryScore

__all__ = ["eval_group"]


@click.group("eval")
def eval_group() -> None:
    """Measure models and agents on this machine: tool calls (BFCL), real bugs (codefix)."""


@eval_group.command("bfcl")
@click.option(
    "-c",
    "--category",
    "categories",
    multiple=True,
    help="simple_python, multiple, parallel, parallel_multiple or irrelevance "
    "(repeatable; default: all five).",
)
@click.option("-m", "--model", default="", help="Model (catalog name or .gguf path for llamacpp).")
@click.option(
    "-e",
    "--engine",
    default=None,
    help="llamacpp (embedded), ollama, openai, or a plugin; default from config.",
)
@click.option(
    "-n",
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Cases per category, drawn with a fixed seed (default: all).",
)
@click.option("--seed", type=int, default=17, show_default=True, help="Seed of the draw.")
@click.option("--json", "as_json", is_flag=True, help="Print the scores as JSON.")
def bfcl(
    categories: tuple[str, ...],
    model: str,
    engine: str | None,
    limit: int | None,
    seed: int,
    as_json: bool,
) -> None:
    """Accuracy on the Berkeley Function Calling Leaderboard's AST categories.

    Each case offers BFCL's functions as tools and asks its question; the calls the
    model makes are read as in any jarvis run (calls written into text recovered,
    arguments repaired and checked against the schema), never run, and scored by
    bfcl-eval's own checker. Needs `pip install --no-deps bfcl-eval==2026.3.23`.
    """
    from .._config import load_config
    from ..engines import select_engine
    from ..evals import CATEGORIES, run_bfcl

    chosen = list(categories) or list(CATEGORIES)
    unknown = [c for c in chosen if c not in CATEGORIES]
    if unknown:
        raise click.BadParameter(
            f"{', '.join(unknown)}; one of: {', '.join(CATEGORIES)}", param_hint="--category"
        )
    backend = select_engine(load_config(), engine, model)
    show = sys.stderr.isatty() and not as_json

    def progress(category: str, done: int, total: int) -> None:
        if show:
            width = 30
            filled = width * done // max(total, 1)
            bar = "#" * filled + "-" * (width - filled)
            end = "\n" if done == total else ""
            click.echo(f"\r{category:<18} [{bar}] {done}/{total}", nl=False, err=True)
            if end:
                click.echo(err=True)

    async def go() -> list[CategoryScore]:
        try:
            return await run_bfcl(
                backend, model, categories=chosen, limit=limit, seed=seed, progress=progress
            )
        finally:
            await backend.aclose()

    scores = asyncio.run(go())
    if as_json:
        click.echo(
            json.dumps(
                {
                    "model": model or backend.default_model(),
                    "engine": backend.name,
                    "scores": [s.to_dict() for s in scores],
                },
                indent=2,
            )
        )
        return
    click.echo(f"BFCL, {backend.name} / {model or backend.default_model() or 'default model'}")
    click.echo(f"{'category':<18} {'n':>4} {'accuracy':>9}")
    for s in scores:
        click.echo(f"{s.category:<18} {s.total:>4} {100 * s.accuracy:>8.1f}%")


@eval_group.command("code")
@click.option(
    "--bugs",
    "bugs",
    default="",
    metavar="N|IDS",
    help="How many bugs (spread over the projects), or which: ids or project "
    "names, comma-separated (default: all).",
)
@click.option(
    "-a",
    "--agent",
    default="native_openhands",
    show_default=True,
    help="The agent of `jarvis code`.",
)
@click.option(
    "--candidates",
    type=click.IntRange(min=1, max=8),
    default=1,
    show_default=True,
    help="Candidates per bug, ranked by the tests (as `jarvis code --candidates`).",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1, max=20),
    default=3,
    show_default=True,
    help="The most agent rounds while the tests fail.",
)
@click.option("-m", "--model", default="", help="Model; default from config.")
@click.option("-e", "--engine", default=None, help="Engine; default from config.")
@click.option("--temperature", type=float, default=None, help="Sampling temperature.")
@click.option(
    "--max-wall",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Budget per bug: most seconds of the agent's run.",
)
@click.option(
    "--results",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append one JSON line per bug to this file, and skip the bugs it holds "
    "already (a stopped run goes on).",
)
@click.option("--list", "list_only", is_flag=True, help="List the corpus's bugs and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def code_eval(
    bugs: str,
    agent: str,
    candidates: int,
    rounds: int,
    model: str,
    engine: str | None,
    temperature: float | None,
    max_wall: float | None,
    results: str | None,
    list_only: bool,
    as_json: bool,
) -> None:
    """How many real bugs `jarvis code` fixes: the codefix corpus.

    Each bug is one small mutation of a real PyPI project (an sdist pinned by sha256),
    made afresh as a git repository. The agent gets a bug report (the failing tests and
    the symptom) and runs as `jarvis code PATH TASK --test SUITE` runs it: setup in the
    sandbox, the test loop, --rounds. The bug counts as fixed when the project's whole
    suite passes in the sandbox on the run's change to the project's source (its
    changes to tests are left out). Progress goes to stderr.
    """
    from pathlib import Path

    from .._config import load_config
    from ..evals.codefix import load_corpus
    from ..evals.codefix._eval import RunConfig, run_eval, summarize

    corpus = load_corpus()
    if list_only:
        for bug in corpus.bugs:
            click.echo(f"{bug.id:<28} {bug.project.requirement:<24} {bug.kind:<10} {bug.symptom}")
        return
    limit = int(bugs) if bugs.strip().isdigit() else None
    if limit == 0:
        raise click.BadParameter("give at least 1", param_hint="--bugs")
    chosen = corpus.select("" if limit is not None else bugs, limit)
    run_config = RunConfig(
        agent=agent,
        candidates=candidates,
        model=model,
        engine=engine,
        temperature=temperature,
        rounds=rounds,
        max_wall=max_wall,
    )

    def progress(line: str) -> None:
        click.echo(f"jarvis: eval code: {line}", err=True)

    rows = run_eval(
        chosen,
        [run_config],
        load_config(),
        results=Path(results) if results else None,
        progress=progress,
    )
    summary = summarize(rows)
    if as_json:
        click.echo(json.dumps({"summary": summary, "results": rows}, indent=2))
        return
    for r in rows:
        word = "fixed" if r["fixed"] else (f"error: {r['error']}" if r["error"] else r["verdict"])
        click.echo(
            f"{r['bug']:<28} {word:<12} {r['wall_s']:>7.1f} s "
            f"{r['prompt_tokens'] + r['completion_tokens']:>8} tokens"
        )
    for s in summary:
        click.echo(
            f"{s['config']} / {s['model'] or 'default model'}: fixed {s['fixed']} of "
            f"{s['n']} ({100 * s['fix_rate']:.0f}%), {s['wall_s']:.0f} s, "
            f"{s['prompt_tokens'] + s['completion_tokens']} tokens"
        )
