"""``jarvis eval``: how well a model and engine call tools, on public benchmarks."""

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
    """Measure how well a model calls tools, on this machine."""


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
    categories: tuple[str, ...], model: str, engine: str | None, limit: int | None, seed: int,
    as_json: bool,
) -> None:  # fmt: skip
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
        click.echo(json.dumps({"model": model or backend.default_model(), "engine": backend.name,
                               "scores": [s.to_dict() for s in scores]}, indent=2))  # fmt: skip
        return
    click.echo(f"BFCL, {backend.name} / {model or backend.default_model() or 'default model'}")
    click.echo(f"{'category':<18} {'n':>4} {'accuracy':>9}")
    for s in scores:
        click.echo(f"{s.category:<18} {s.total:>4} {100 * s.accuracy:>8.1f}%")
