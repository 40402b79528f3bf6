"""What a ``jarvis code`` agent is told, and what its summary is held to.

The first message puts in front of the agent what it needs: the task, the test command,
the failing tests' output (its tail), the source files that define what the task and
the failures call (``_locate``), and the files the failures and the task name, all
bounded in bytes (small models do far better with them than with a path to explore).
The project's source comes before its tests: a model shown only a test changes it.
A later round tells it that the tests still fail, with their new output.

:func:`claims_change` and :func:`asks_no_change` (``jarvisd._claims``) read the agent's
summary and the task: a summary that says it changed something, with an empty diff, is
a ``no_change``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from .._claims import asks_no_change, claims_change
from ._digest import digest
from ._excerpt import excerpt
from ._locate import defining_files, is_test_file
from ._testrun import named_files, read_below

if TYPE_CHECKING:
    from ._store import Workspace
    from ._testrun import TestRun

__all__ = ["asks_no_change", "claims_change", "round_prompt", "task_prompt"]

#: The most of the tests' output put in a message (its digest, or its tail), in bytes:
#: with the files below, about 2,500 tokens, a first message the 1.5B model reads in a
#: minute or two on two loaded cores (16 KB, semver's, took it 5 minutes a reply).
MAX_FEEDBACK_BYTES = 3000
#: The most files, and bytes of them together, put in a message.
MAX_FILES = 3
#: Of those, the most found by what they define rather than by their path.
MAX_DEFINING = 2
MAX_FILES_BYTES = 6000
#: The most of each named file read to find the definitions named in it.
MAX_PARSED_BYTES = 200_000


#: pytest's warnings summary: a section header, up to the next section header or the end.
_WARNINGS = re.compile(r"^=+ warnings summary =+\n.*?(?=^=+ [^\n]* =+$|\Z)", re.M | re.S)


def _without_warnings(output: str) -> str:
    """``output`` without pytest's warnings summary: on a real project's whole suite
    it can fill the tail the agent is shown (semver's deprecation warnings: all of
    it), pushing out the failures themselves."""

    def note(match: re.Match[str]) -> str:
        lines = match.group(0).count("\n")
        return f"[pytest's warnings summary: {lines} lines left out]\n"

    return _WARNINGS.sub(note, output)


def _tail(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return "[...]\n" + data[-limit:].decode("utf-8", "ignore")


def _named(texts: list[str], ws: Workspace) -> list[tuple[str, str]]:
    """The files ``texts`` name by path and the source files that define what they
    call, the project's source first, each whole or as the definitions they name
    (``_excerpt``), at most :data:`MAX_FILES` files and :data:`MAX_FILES_BYTES`
    together (a longer one is cut)."""
    files = named_files(texts, Path(ws.path), max_files=MAX_FILES, max_bytes=MAX_PARSED_BYTES)
    shown = {rel for rel, _ in files}
    for rel in defining_files(texts, ws.path, skip=shown, max_files=MAX_DEFINING):
        data = read_below(ws.path, rel, MAX_PARSED_BYTES)
        if data is not None:
            files.append((rel, data.decode("utf-8", "replace")))
    files = sorted(files, key=lambda file: is_test_file(file[0]))[:MAX_FILES]
    out = []
    left = MAX_FILES_BYTES
    for rel, whole in files:
        if left <= 0:
            break
        # Of a long file, the definitions that fit what is left, the cited and called
        # ones first (semver's: a 50-line parse() took the room of bump_minor()).
        data = excerpt(rel, whole, texts, left).encode()
        text = data[:left].decode("utf-8", "ignore")
        if len(data) > left:
            text += "\n[... the rest of the file is left out ...]"
        left -= min(len(data), left)
        out.append((rel, text))
    return out


def _files_block(texts: list[str], ws: Workspace, helpers: bool = False) -> list[str]:
    files = _named(texts, ws)
    parts = []
    if files:
        parts.append("The files these name, as they are now:")
        for rel, text in files:
            parts.append(f"{ws.path}/{rel}:\n```\n{text}\n```")
    if helpers:
        # Small models show the fixed file in a block and believe it saved: say how.
        where = f"{ws.path}/{files[0][0]}" if files else f"{ws.path}/FILE"
        parts.append(
            "A code block runs as a program: showing or defining the new code saves no "
            f"file. Change a file by running code that writes it, such as: replace({where!r}, "
            "'the exact old lines', 'the new lines')"
        )
    return parts


#: What a message asks for last. (Asked for the code block first and the summary after
#: it ran, 1.5B wrote code blocks on past its fix of the inflection bug until it was out
#: of turns: the summary is asked for once the work is done.)
CLOSING = "When you are done, reply with a short summary of what you changed."


def _output(test: TestRun) -> str:
    """The tests' output as the agent is shown it: without pytest's warnings, as its
    digest when it is too long (``_digest``), and at most its tail."""
    text = _without_warnings(test.output)
    if len(text.encode()) > MAX_FEEDBACK_BYTES:
        short = digest(text)
        if short is not None:
            text = "[pytest's output: each failure's failing line and errors]\n" + short
    return _tail(text, MAX_FEEDBACK_BYTES)


def _test_block(test: TestRun, after_change: bool = False) -> list[str]:
    output = _output(test)
    if test.could_not_run and after_change:
        # They ran before the change: the change broke them (an import, a syntax error).
        return [
            f"After your change the test command could not run the tests: {test.error}. "
            f"The end of its output:\n```\n{output}\n```"
        ]
    if test.could_not_run:
        return [
            f"The test command could not run the tests here: {test.error}. Changing the "
            "code will not make it run; do the task as well as you can without it."
        ]
    return [
        f"The tests fail now (exit {test.exit_code}). The end of their output:\n```\n{output}\n```"
    ]


def task_prompt(
    ws: Workspace, task: str, before: TestRun | None = None, *, helpers: bool = False
) -> str:
    """The agent's first message: where the project is, the test command, the task,
    and, with a test run that did not pass, its output and the files named; with
    ``helpers`` (CodeAct's file helpers), how to change a file with them."""
    lines = [
        f"You are working on a software project whose files are in the directory {ws.path} "
        "(a working copy: change the files there; your changes are reviewed before they "
        "reach the project). Use absolute paths under that directory.",
    ]
    if ws.test:
        lines.append(f"The project's tests run with: cd {ws.path} && {ws.test}")
    lines.append(f"Task: {task}")
    named = [task]
    if before is not None and not before.passed:
        lines += _test_block(before)
        if not before.could_not_run:
            named.append(_output(before))  # what it is shown names the files
    lines += _files_block(named, ws, helpers)
    lines.append(CLOSING)
    return "\n\n".join(lines)


def round_prompt(
    ws: Workspace,
    task: str,
    after: TestRun,
    summary: str,
    number: int,
    rounds: int,
    *,
    helpers: bool = False,
    acted: bool = True,
) -> str:
    """The message of round ``number``: the task again, what the agent said last time,
    and the tests' new output (the files are in the state the last round left).
    ``acted``: whether the last round ran any code; a summary of a round that ran none
    is not repeated to it (1.5B copied its own claim of a change it never made, round
    after round), it is told that nothing changed."""
    said = (
        f"You said you were done: {_tail(summary, 1000) or '(no summary)'}"
        if acted
        else "Your last replies ran no code, so no file has changed: describing a change "
        "does not make it."
    )
    lines = [
        f"You are working on a software project whose files are in the directory {ws.path}. "
        "Use absolute paths under that directory.",
        f"The project's tests run with: cd {ws.path} && {ws.test}",
        f"Task: {task}",
        said,
        f"But the tests still do not pass (round {number} of {rounds}).",
        *_test_block(after, after_change=True),
        *_files_block([task, _output(after)], ws, helpers),
        "Go on: change the files so that the tests pass. " + CLOSING,
    ]
    return "\n\n".join(lines)
