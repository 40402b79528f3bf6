"""pytest's output cut to what says why each test failed.

A whole suite's failures fill the tail the agent is shown with the tests' own source:
pytest prints each failing test's body, and a parametrized test's table of cases
(semver's bump failures: 4 KB of tuples, the assertions pushed out). The 1.5B model
reads every byte of it before it answers, at tens of tokens a second on two cores.
So an output longer than the message allows is shown as its digest: each failure's
header, the line that failed (pytest's ``>``), its ``E`` lines and where it failed
(``path:LINE: Error``), then the short summary; at most :data:`MAX_E_LINES` ``E``
lines a failure, and :data:`MAX_FAILURES` failures (cachetools' bug fails 26 tests
the same way). Output that is not pytest's, or holds no failure section, is left
as it is (its tail is shown).
"""

from __future__ import annotations

import re

__all__ = ["MAX_E_LINES", "MAX_FAILURES", "digest"]

#: The most ``E`` lines kept of one failure (a long diff of two lists says no more).
MAX_E_LINES = 6
#: The most failures shown; the short summary names them all.
MAX_FAILURES = 5

#: A section header: ``===== FAILURES =====``, ``____ test_x ____``.
_SECTION = re.compile(r"^=+ (.+?) =+$")
_FAILURE = re.compile(r"^_{3,} (.+?) _{3,}$")
#: Where a failure happened: ``tests/test_x.py:12: AssertionError``.
_WHERE = re.compile(r"^[^\s:]+\.py:\d+: \w")


def _failure_lines(block: list[str]) -> list[str]:
    out, errors = [], 0
    for line in block:
        if line.startswith(">"):
            out.append(line)
        elif line.startswith("E "):
            errors += 1
            if errors <= MAX_E_LINES:
                out.append(line)
            elif errors == MAX_E_LINES + 1:
                out.append("E   [...]")
        elif _WHERE.match(line):
            out.append(line)
    return out


def digest(output: str) -> str | None:
    """The digest of pytest's ``output`` (see the module docstring), or None when it
    has no FAILURES or ERRORS section to digest."""
    lines = output.splitlines()
    out: list[str] = []
    section = ""
    block: list[str] = []
    found = False
    failures = 0

    def flush() -> None:
        if block and failures <= MAX_FAILURES:
            out.extend(_failure_lines(block))
        block.clear()

    for line in lines:
        header = _SECTION.match(line)
        if header:
            flush()
            section = header.group(1).strip().lower()
            if section in ("failures", "errors"):
                found = True
                out.append(line)
            elif section != "warnings summary":
                out.append(line)
            continue
        if section in ("failures", "errors"):
            if _FAILURE.match(line):
                flush()
                failures += 1
                if failures <= MAX_FAILURES:
                    out.append(line)
                elif failures == MAX_FAILURES + 1:
                    out.append("[... the other failures are left out: see the summary ...]")
            else:
                block.append(line)
        elif section == "short test summary info" or not section:
            # pytest's progress dots come before any section: left out.
            if section:
                out.append(line)
        elif section != "warnings summary":
            out.append(line)
    flush()
    return "\n".join(out) + "\n" if found else None
