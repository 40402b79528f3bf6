"""``jarvis ask``: one question, one answer, streamed as it is generated."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import click

from .._errors import UsageError

__all__ = ["ask", "ask_in_process", "render"]


def _read_question(question: str) -> str:
    if question == "-":
        if sys.stdin.isatty():
            raise UsageError("`-` reads the question from stdin, but stdin is a terminal")
        question = sys.stdin.read()
    question = question.strip()
    if not question:
        raise UsageError("the question is empty")
    return question


async def run_ask(spec: Any, run: Any, config: Any, engine: Any = None) -> dict[str, Any]:
    """Run ``spec`` under ``run`` and return the JSON-able outcome. The one place that
    shapes it: the in-process path and the daemon's ``ask`` both call this. An engine
    passed in (the daemon keeps them warm) is not closed here."""
    from ..engines import select_engine
    from ..runtime import run_agent

    own = engine is None
    engine = engine or select_engine(config, spec.engine, spec.model)
    start = time.perf_counter()
    try:
        result = await run_agent(spec, run, config=config, engine=engine)
    finally:
        if own:
            await engine.aclose()
    return {
        "answer": result.content,
        "agent": spec.agent or config.agent.default,
        "engine": engine.name,
        "model": result.metadata.get("model") or spec.model or engine.default_model(),
        "turns": result.turns,
        "usage": result.usage.to_dict(),
        "tool_results": [r.to_dict() for r in result.tool_results],
        "metadata": result.metadata,
        "duration_s": round(time.perf_counter() - start, 3),
    }


def ask_in_process(spec: Any, on_delta: Callable[[str], None] | None) -> dict[str, Any]:
    """Run ``spec`` in this process; returns the JSON-able outcome (same shape as the
    daemon's ask reply)."""
    import asyncio

    from .._config import load_config
    from .._run import RunContext

    run = RunContext(on_delta=on_delta)
    try:
        outcome: dict[str, Any] = asyncio.run(run_ask(spec, run, load_config()))
    except KeyboardInterrupt:
        run.cancel.cancel("interrupted")
        raise
    return outcome


def ask_via_daemon(spec: Any, on_delta: Callable[[str], None] | None) -> dict[str, Any] | None:
    """Run ``spec`` in a running jarvisd; None when no daemon answers (run in process)."""
    import dataclasses
    import itertools
    import os

    from .._errors import DaemonUnavailable
    from ..daemon import Client
    from ..daemon._protocol import Delta

    # The daemon has its own working directory: send absolute paths.
    def absolute(mount: str) -> str:
        path, sep, mode = mount.rpartition(":")
        if sep and mode in ("rw", "ro"):
            return os.path.abspath(os.path.expanduser(path)) + ":" + mode
        return os.path.abspath(os.path.expanduser(mount))

    spec = dataclasses.replace(
        spec,
        mounts=tuple(absolute(m) for m in spec.mounts),
        context_file=None if spec.context_file is None
        else os.path.abspath(os.path.expanduser(spec.context_file)),
    )  # fmt: skip
    try:
        replies = Client(connect_timeout=0.5).ask(spec)
        first = next(replies)
    except DaemonUnavailable:
        return None
    for reply in itertools.chain([first], replies):
        if isinstance(reply, Delta):
            if on_delta is not None:
                on_delta(reply.text)
        else:
            return dict(reply.result)
    raise DaemonUnavailable("jarvisd ended the answer without a result")


def render(outcome: dict[str, Any], *, as_json: bool, streamed: bool) -> None:
    """Print an outcome: JSON, or the answer (just a newline if it was streamed)."""
    import json

    if as_json:
        click.echo(json.dumps(outcome, indent=2, ensure_ascii=False))
        return
    if streamed:
        click.echo()
    else:
        click.echo(outcome["answer"])
    error = outcome.get("metadata", {}).get("error")
    if error:
        click.echo(f"jarvis: the agent reported an error: {error}", err=True)


@click.command()
@click.argument("question")
@click.option(
    "-a", "--agent", default="", help="Agent key (see `jarvis agents list`); default from config."
)
@click.option(
    "-e", "--engine", default=None, help="llamacpp (embedded), ollama, openai, or a plugin."
)
@click.option(
    "-m", "--model", default="", help="Model name (catalog name or .gguf path for llamacpp)."
)
@click.option("-t", "--tools", default="", help="Comma-separated tools for tool-using agents.")
@click.option("--context", "context_file", type=click.Path(dir_okay=False), default=None,
              help="A file given to the agent as its context (rlm keeps it in its REPL).")  # fmt: skip
@click.option("--sandbox", is_flag=True, help="Run the agent in a network-disabled container.")
@click.option("--mount", "mounts", multiple=True, metavar="PATH[:rw]",
              help="Mount a host path into the sandbox (read-only unless :rw). Repeatable.")  # fmt: skip
@click.option("--temperature", type=float, default=None, help="Sampling temperature.")
@click.option("--max-tokens", type=int, default=None, help="Most tokens per model reply.")
@click.option("--max-turns", type=int, default=None, help="Most model turns for tool-using agents.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("--no-stream", is_flag=True, help="Print the answer at the end instead of streaming.")
@click.option("--no-daemon", is_flag=True, help="Run in this process even when jarvisd runs.")
def ask(
    question: str,
    agent: str,
    engine: str | None,
    model: str,
    tools: str,
    context_file: str | None,
    sandbox: bool,
    mounts: tuple[str, ...],
    temperature: float | None,
    max_tokens: int | None,
    max_turns: int | None,
    as_json: bool,
    no_stream: bool,
    no_daemon: bool,
) -> None:
    """Ask QUESTION (or `-` to read it from stdin) and print the answer.

    Uses the embedded llama.cpp engine unless --engine, the config or a running
    Ollama says otherwise. Exit codes: 0 answered, 2 usage error, 3 engine unavailable.

    \b
    Examples:
      jarvis ask "Name three primary colors."
      echo "What is 17*23?" | jarvis ask --agent orchestrator --tools calculator -
      jarvis ask --agent rlm --context notes.txt "Summarise the decisions."
    """
    from ..runtime import AgentSpec

    if mounts and not sandbox:
        raise UsageError("--mount only applies with --sandbox")
    spec = AgentSpec(
        input=_read_question(question),
        agent=agent,
        engine=engine,
        model=model,
        tools=tuple(t.strip() for t in tools.split(",") if t.strip()),
        sandbox=sandbox,
        mounts=mounts,
        context_file=context_file,
        temperature=temperature,
        max_tokens=max_tokens,
        max_turns=max_turns,
    )
    stream = not (as_json or no_stream)
    streamed = False

    def on_delta(text: str) -> None:
        nonlocal streamed
        streamed = True
        click.echo(text, nl=False)
        sys.stdout.flush()

    outcome = None if no_daemon else ask_via_daemon(spec, on_delta if stream else None)
    if outcome is None:
        outcome = ask_in_process(spec, on_delta if stream else None)
    render(outcome, as_json=as_json, streamed=streamed)
