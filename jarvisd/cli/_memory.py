"""``jarvis memory``: add text to the memory store, search it."""

from __future__ import annotations

import json
import sys

import click


@click.group()
def memory() -> None:
    """Add text to memory and search it (SQLite FTS5)."""


@memory.command("add")
@click.argument("text")
@click.option("--source", default="", help="Where the text came from.")
def add(text: str, source: str) -> None:
    """Store TEXT ('-' reads standard input). Prints the new id."""
    from ..memory import MemoryStore

    if text == "-":
        text = sys.stdin.read()
    click.echo(MemoryStore().add(text, source=source))


@memory.command("search")
@click.argument("query")
@click.option("-k", "k", default=5, show_default=True, help="How many results.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def search(query: str, k: int, as_json: bool) -> None:
    """Best matches for QUERY (BM25)."""
    from ..memory import MemoryStore

    hits = MemoryStore().search(query, k)
    if as_json:
        click.echo(json.dumps([h.to_dict() for h in hits], indent=2))
        return
    if not hits:
        click.echo("no matches")
    for hit in hits:
        click.echo(f"[{hit.id}] ({hit.score:.2f}) {hit.text}")
