"""The small SQLite stores (traces, memory) opened by many processes at once: task
workers and `jarvis ask` all record their runs in one trace store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CODE = """
import sys, time
from pathlib import Path
from jarvisd._sqlite import open_db
start = float(sys.argv[2])
while time.time() < start:
    pass
conn = open_db(Path(sys.argv[1]), "CREATE TABLE IF NOT EXISTS t (x INTEGER);")
with conn:
    conn.execute("INSERT INTO t VALUES (1)")
print("ok")
"""


def test_many_processes_open_one_new_store_at_once(tmp_path: Path) -> None:
    import time

    db = tmp_path / "traces.db"
    for round_ in range(3):
        path = db.with_name(f"traces{round_}.db")
        start = time.time() + 1.0  # all of them switch the new file to WAL together
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", CODE, str(path), str(start)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(8)
        ]
        results = [p.communicate(timeout=60) for p in procs]
        failed = [err for (out, err) in results if out.strip() != "ok"]
        assert not failed, failed[0]
