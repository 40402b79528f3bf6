"""``jarvis ask``: one question, one answer, streamed as it is generated.

The question runs in jarvisd when it answers (``DaemonHost``), else in this process
(``LocalHost``); either way the command prints the same answer, stderr line, exit code
and ``--json`` keys, because both hosts return the same :class:`RunOutcome`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import click

from .._errors import UsageError
from ._run_options import build_spec, run_options

if TYPE_CHECKING:
    from .._events import Event
    from .._runcontext import RunContext
    from ..external import PermissionRequest
    from ..runs import AgentSpec, Host, RunOutcome

__all__ = ["ask", "pick_host", "render", "run_on_host", "status_line"]

#: How a failure is headed on stderr, by code (the rest: "error").
_HEADLINES = {"cancelled": "cancelled", "budget": "stopped"}


def terminal_approver() -> Callable[[PermissionRequest], Awaitable[bool]] | None:
    """A y/N question on stderr for an external agent's permission requests under
    "ask" (a ``jarvisd.external.Approver``), when a person sits at the terminal; else
    None, and those requests are denied."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None

    async def approve(request: PermissionRequest) -> bool:
        import asyncio
        import threading

        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bool] = loop.create_future()
        # The agent chose the title: its controls are shown, not obeyed (a bidi
        # override or a hiding escape would make the question read otherwise).
        prompt = f"jarvis: allow {visible(request.tool)} (kind {visible(request.kind)})?"

        def settle(allowed: bool) -> None:
            if not answer.done():
                answer.set_result(allowed)

        def read() -> None:
            try:
                allowed = click.confirm(prompt, default=False, err=True)
            except (click.Abort, EOFError, OSError):
                allowed = False
            loop.call_soon_threadsafe(settle, allowed)

        # A daemon thread: a run cancelled while it waits for a line must not keep the
        # process alive at exit (an executor thread would).
        threading.Thread(target=read, name="jarvis-approve", daemon=True).start()
        return await answer

    return approve


def _read_question(question: str) -> str:
    if question == "-":
        if sys.stdin.isatty():
            raise UsageError("`-` reads the question from stdin, but stdin is a terminal")
        question = sys.stdin.read()
    question = question.strip()
    if not question:
        raise UsageError("the question is empty")
    return question


def pick_host(no_daemon: bool) -> list[Host]:
    """The hosts to try, in order: jarvisd when it runs, then this process."""
    from ..daemon import DaemonHost
    from ..runs import LocalHost

    return [LocalHost()] if no_daemon else [DaemonHost(), LocalHost()]


def run_on_host(spec: AgentSpec, run: RunContext, hosts: list[Host]) -> RunOutcome:
    """Run on the first host that is there. Only a daemon that could not be reached
    passes the question on: once sent, it is never run a second time."""
    from .._errors import DaemonUnavailable

    for host in hosts[:-1]:
        try:
            return host.run(spec, run)
        except DaemonUnavailable:
            continue
    return hosts[-1].run(spec, run)


def status_line(event: Event) -> str | None:
    """One line for a tool call as it starts (None: nothing to show for this event)."""
    data = event.data
    if event.type.value != "tool_call_start":
        return None
    arguments = json.dumps(data.get("arguments"), ensure_ascii=False, default=str)
    if len(arguments) > 120:
        arguments = arguments[:117] + "..."
    return visible(f"· {data.get('tool')} {arguments}")


def render(outcome: RunOutcome, *, as_json: bool, streamed: bool, on_terminal: bool) -> None:
    """Print an outcome (JSON, or the answer unless it was streamed), and on failure
    one line on stderr."""
    if as_json:
        click.echo(json.dumps(outcome.to_dict(), indent=2, ensure_ascii=False))
    elif streamed:
        click.echo()
    elif outcome.ok:
        answer = outcome.answer
        click.echo(_for_terminal(answer) if on_terminal else answer)
    network = outcome.metadata.get("network")
    if not as_json and isinstance(network, dict):  # the run's egress, when it had any
        said = network.get("line") or network.get("warning")
        click.echo(f"jarvis: {_for_terminal(str(said))}", err=True)
    failure = outcome.failure
    if failure is not None:
        headline = _HEADLINES.get(failure.code, "error")
        click.echo(f"jarvis: {headline}: {_for_terminal(failure.message)}", err=True)


def visible(text: object) -> str:
    from ._terminal import visible

    return visible(text)


def _for_terminal(text: str) -> str:
    from ._terminal import for_terminal

    return for_terminal(text)


@click.command()
@click.argument("question")
@run_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object (the run's outcome) instead of text.",
)
@click.option("--no-stream", is_flag=True, help="Print the answer at the end instead of streaming.")
@click.option("--no-daemon", is_flag=True, help="Run in this process even when jarvisd runs.")
def ask(question: str, as_json: bool, no_stream: bool, no_daemon: bool, **run_values: Any) -> None:
    """Ask QUESTION (or `-` to read it from stdin) and print the answer.

    Runs in jarvisd when it is running, else in this process, with the same result.
    Uses the embedded llama.cpp engine unless --engine, the config or a running
    Ollama says otherwise. Tool calls show as one status line each (on stderr when
    stdout is not a terminal).

    Exit codes: 0 answered, 1 no answer (the agent failed, or a budget stopped it),
    2 usage error, 3 engine or sandbox unavailable, 130 interrupted.

    \b
    Examples:
      jarvis ask "Name three primary colors."
      echo "What is 17*23?" | jarvis ask --agent orchestrator --tools calculator -
      jarvis ask --agent rlm --context notes.txt --option max_depth=3 "Summarise."
    """
    from .._runcontext import RunContext

    spec = build_spec(_read_question(question), **run_values)
    stdout_tty = sys.stdout.isatty()
    stream = not (as_json or no_stream)
    streamed = False

    def on_delta(text: str) -> None:
        nonlocal streamed
        streamed = True
        click.echo(_for_terminal(text) if stdout_tty else text, nl=False)
        sys.stdout.flush()

    run = RunContext(on_delta=on_delta if stream else None)
    run.approver = terminal_approver()  # in this process only; jarvisd's asks deny
    if not as_json:

        def show(event: Event) -> None:
            line = status_line(event)
            if line is not None:
                click.echo(_for_terminal(line), err=not stdout_tty)

        run.bus.subscribe(show)
    outcome = run_on_host(spec, run, pick_host(no_daemon))
    render(outcome, as_json=as_json, streamed=streamed, on_terminal=stdout_tty)
    if not outcome.ok:
        sys.exit(outcome.exit_code)
