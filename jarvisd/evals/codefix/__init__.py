"""The codefix yardstick: real bugs in real PyPI projects, fixed (or not) by
``jarvis code`` (``jarvis eval code``, ``benchmarks/bench_codefix.py``).

- ``corpus.toml``: the projects (sdists pinned by sha256) and the bugs (one small
  mutation each, the tests it makes fail);
- :func:`build_bug`: the project with the bug, as a fresh git repository;
- :func:`check_bug`: in the sandbox, the pristine suite passes and the bug fails
  exactly its tests (``python -m jarvisd.evals.codefix`` checks them all);
- :func:`run_eval`: each bug through ``jarvis code``, judged by the whole suite.
"""

from ._build import BugRepo, BuildError, build_bug, cache_dir, fetch_sdist, mutate, pristine
from ._check import SuiteResult, check_bug, failing_tests, fixed_tree, run_suite
from ._corpus import Bug, Corpus, Project, load_corpus

__all__ = [
    "Bug",
    "BugRepo",
    "BuildError",
    "Corpus",
    "Project",
    "SuiteResult",
    "build_bug",
    "cache_dir",
    "check_bug",
    "failing_tests",
    "fetch_sdist",
    "fixed_tree",
    "load_corpus",
    "mutate",
    "pristine",
    "run_suite",
]
