"""How a sandbox starts jarvis's own runner (``runners.sandbox_runner``)."""

from __future__ import annotations

from ._policy import CODE_ROOT

__all__ = ["RUNNER_ARGV"]

#: -I: isolated, so nothing a sandboxed user can write is ever on the runner's import
#: path (no working directory, no PYTHON* variables, no user site): the runner starts
#: as root and its launcher stays root (executors._privsep). jarvis's own code is put
#: on the path by hand, from its read-only mount. -S: no site module; -c rather than
#: -m: no runpy. Both are start-up time in every run.
RUNNER_ARGV = (
    "python3", "-I", "-S", "-B", "-c",
    f"import sys; sys.path.insert(0, {CODE_ROOT!r}); "
    "from runners.sandbox_runner import entry; entry()",
)  # fmt: skip
