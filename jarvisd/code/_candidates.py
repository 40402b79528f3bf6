"""Verified candidates: several agents (``--candidates N``, ``--agents a,b``) work on the
same task, each in its own workspace, under one budget, and the project's tests rank
what they made.

With small local models, sampling several attempts and keeping the one the tests accept
is the surest way to raise the fix rate. The ranking, best first:

1. the tests pass;
2. the tests ran and failed: fewest failures first (as the runner counted them; a count
   it did not print ranks after every count);
3. no verdict: no test command, or one that could not run the tests;
4. nothing to apply: no change, or the agent's run failed.

Within a tier the smallest diff (lines added and removed) wins, then the lower number.
A group is its first workspace (``group`` is its id; ``members`` on it lists all); the
run of its first workspace runs them all, so a daemon task, its cancel and its budget
cover the whole group.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import UsageError, WorkspaceError
from ._store import CodeStore, Workspace

__all__ = ["MAX_CANDIDATES", "Ranked", "failure_count", "group_of", "prepare_group", "rank"]

MAX_CANDIDATES = 8

_PYTEST_COUNTS = re.compile(r"(\d+) (failed|errors?)\b")
_UNITTEST = re.compile(r"FAILED \(([^)]*)\)")
_UNITTEST_COUNTS = re.compile(r"(?:failures|errors)=(\d+)")


def failure_count(output: str) -> int | None:
    """How many tests failed, as pytest's or unittest's summary line says (the last one
    printed); None when the output holds no such line."""
    unittest = _UNITTEST.findall(output)
    if unittest:
        return sum(int(n) for n in _UNITTEST_COUNTS.findall(unittest[-1]))
    lines = [line for line in output.splitlines() if _PYTEST_COUNTS.search(line)]
    if lines:
        return sum(int(n) for n, _ in _PYTEST_COUNTS.findall(lines[-1]))
    return None


@dataclass(frozen=True, slots=True)
class Ranked:
    """One candidate as ranked: its number, workspace, agent, and what ranked it."""

    candidate: int
    workspace: str
    agent: str
    tier: int  # 1 passed, 2 failed, 3 no verdict, 4 nothing to apply
    verdict: str
    failures: int | None
    diff_lines: int
    files: int
    failure: str  # the run's failure code, or ""

    def key(self) -> tuple[int, int, int, int]:
        failures = self.failures if self.failures is not None else 1 << 30
        return (self.tier, failures if self.tier == 2 else 0, self.diff_lines, self.candidate)

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "workspace": self.workspace,
            "agent": self.agent,
            "tier": self.tier,
            "verdict": self.verdict,
            "failures": self.failures,
            "diff_lines": self.diff_lines,
            "files": self.files,
            "failure": self.failure,
        }


def _diff_lines(diff: str) -> int:
    return sum(
        1
        for line in diff.splitlines()
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
    )


def ranked(ws: Workspace) -> Ranked:
    """What ranks ``ws`` (a candidate whose run ended)."""
    out: Mapping[str, Any] = ws.outcome
    failure = out.get("failure")
    code = str(failure.get("code") or "") if isinstance(failure, Mapping) else ""
    test = out.get("test_after")
    verdict = str(test.get("verdict") or "") if isinstance(test, Mapping) else ""
    failures = None
    if not out.get("changed") or (code and code != "test_error"):
        tier = 4
    elif verdict == "passed":
        tier, failures = 1, 0
    elif verdict == "failed":
        tier = 2
        failures = (
            failure_count(str(test.get("output") or "")) if isinstance(test, Mapping) else None
        )
    else:
        tier = 3
    return Ranked(
        ws.candidate,
        ws.id,
        ws.agent,
        tier,
        verdict or "-",
        failures,
        _diff_lines(str(out.get("diff") or "")),
        len(out.get("files") or ()),
        code,
    )


def rank(members: Sequence[Workspace]) -> list[Ranked]:
    """The candidates, best first."""
    return sorted((ranked(ws) for ws in members), key=Ranked.key)


def group_of(store: CodeStore, ws: Workspace) -> list[Workspace]:
    """Every workspace of ``ws``'s group, in candidate order ([ws] when it has none)."""
    if not ws.group:
        return [ws]
    try:
        lead = ws if ws.id == ws.group else store.get(ws.group)
    except WorkspaceError:  # the first was discarded: the others stand alone
        return [ws]
    found = []
    for member in lead.members:
        try:
            found.append(lead if member == lead.id else store.get(member))
        except WorkspaceError:
            continue  # discarded
    return found or [ws]


def prepare_group(
    source: str,
    *,
    store: CodeStore,
    state_dir: Path,
    task: str,
    agents: Sequence[str],
    test: str = "",
    respect_gitignore: bool = False,
    rounds: int = 1,
) -> Workspace:
    """Make one workspace per agent in ``agents`` (the same agent again for sampled
    candidates), recorded as one group; the first is returned (its run runs them all).
    Nothing is left behind when one cannot be made."""
    from ._workspace import discard, prepare

    if not 2 <= len(agents) <= MAX_CANDIDATES:
        raise UsageError(f"candidates: give 2 to {MAX_CANDIDATES} (got {len(agents)})")
    made: list[Workspace] = []
    try:
        for agent in agents:
            made.append(
                prepare(
                    source,
                    store=store,
                    state_dir=state_dir,
                    task=task,
                    agent=agent,
                    test=test,
                    respect_gitignore=respect_gitignore,
                    rounds=rounds,
                )
            )
    except BaseException:
        for ws in made:
            try:
                discard(ws, store, state_dir)
            except WorkspaceError:
                pass  # removed as far as it could be; the first error says why
        raise
    lead = made[0]
    members = tuple(ws.id for ws in made)
    for number, ws in enumerate(made, 1):
        changes: dict[str, Any] = {"group": lead.id, "candidate": number}
        if ws.id == lead.id:
            changes["members"] = members
        made[number - 1] = store.update(ws, **changes)
    return made[0]
