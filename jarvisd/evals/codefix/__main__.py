"""``python -m jarvisd.evals.codefix [IDS]``: make each bug of the corpus from its
pinned sdist and check it in the sandbox (the pristine suite passes; the bug fails
exactly the tests the corpus names). Deterministic; downloads cached."""

from __future__ import annotations

import asyncio
import sys
import time

from ..._errors import JarvisError
from . import build_bug, check_bug, load_corpus
from ._eval import bug_dir


def main(argv: list[str]) -> int:
    from ..._config import load_config

    config = load_config()
    bugs = load_corpus().select(",".join(argv))
    bad = 0
    for bug in bugs:
        started = time.perf_counter()
        try:
            repo = build_bug(bug, bug_dir(bug))
            _, after = asyncio.run(check_bug(repo, config))
        except JarvisError as exc:
            bad += 1
            print(f"{bug.id}: FAIL {exc}", flush=True)
            continue
        print(
            f"{bug.id}: ok ({len(after.failing)} failing with the bug; "
            f"{time.perf_counter() - started:.1f} s)",
            flush=True,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
