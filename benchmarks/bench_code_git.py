"""Host-side git work on a hostile change: an agent writes 100 sparse files of 63 MiB
(6.2 GiB by size, nothing on disk) into a `jarvis code` workspace of a git project.

Rows: the time jarvis takes to record the change (refused at once by the default
``[code] max_change_bytes``; and, informationally, recorded with the limits lifted),
and the bytes added to the project's ``.git/objects`` once the workspace is discarded
(jarvis records into a private repository: none). Informational rows, no targets.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from benchmarks.bench_code import make_repository
from benchmarks.harness import BenchEnv, Row

SPARSE_FILES = 100
SPARSE_BYTES = 63 << 20


def _objects_bytes(project: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(project / ".git" / "objects"):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def measure(tmp: Path, lifted: bool) -> tuple[float, int, str]:
    """(seconds to record, bytes left in the project's .git/objects after discard,
    the error when the change was refused)."""
    from jarvisd.code import CodeStore, discard, prepare
    from jarvisd.code._workspace import snapshot

    project = make_repository(tmp / "project", 100)
    state = tmp / "state"
    store = CodeStore(state / "code.db")
    before = _objects_bytes(project)
    ws = prepare(str(project), store=store, state_dir=state, task="bench")
    for i in range(SPARSE_FILES):
        with open(Path(ws.path) / f"sparse{i:03d}.bin", "wb") as handle:
            handle.truncate(SPARSE_BYTES)
    error = ""
    start = time.perf_counter()
    try:
        try:
            from jarvisd.code._record import Limits
        except ImportError:  # the code before the bound: no limits
            snapshot(ws)
        else:
            big = 1 << 40
            snapshot(ws, Limits(big, big) if lifted else Limits(50 << 20, 500 << 20))
    except Exception as exc:  # the refusal is the result
        error = str(exc)
    seconds = time.perf_counter() - start
    discard(store.get(ws.id), store, state)
    store.close()
    return seconds, _objects_bytes(project) - before, error


def run(env: BenchEnv) -> list[Row]:
    refused_s, left, error = measure(env.tmp / "code-git-refused", lifted=False)
    rows = [
        Row(
            f"record {SPARSE_FILES} sparse {SPARSE_BYTES >> 20} MiB files (default limits)",
            refused_s, "s", passed=None,
            notes=f"refused: {error[:120]}" if error else "recorded",
        ),
        Row(
            "bytes left in the project's .git/objects after discard", float(left), "B",
            passed=None, notes="jarvis records into a private repository beside the workspace",
        ),
    ]  # fmt: skip
    if env.quick:  # reading 6 GiB of zeros takes minutes on a loaded machine
        return rows
    lifted_s, _left, _ = measure(env.tmp / "code-git-lifted", lifted=True)
    return [*rows, Row(
        f"record {SPARSE_FILES} sparse {SPARSE_BYTES >> 20} MiB files (limits lifted)",
        lifted_s, "s", passed=None, notes="every byte read, named and handed to git",
    )]  # fmt: skip


if __name__ == "__main__":  # python -m benchmarks.bench_code_git [lifted]
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print(measure(Path(tmp), lifted="lifted" in sys.argv[1:]))
