"""A stand-in for ``jarvisd.daemon._worker`` that leaves processes behind, as a careless
tool would: run as ``standin_worker.py MODE PIDS_FILE [ignored worker arguments]``.

It reads the start frame, starts two ``sleep`` processes (one in its own process group,
one in a new session, so neither the group kill nor a late tree walk finds it), writes
their pids to PIDS_FILE, then waits for ``cancel``. MODE:

* ``tool``: reports a tool call start first; on cancel answers ``cancelled`` and exits
  at once, its subprocesses still running.
* ``idle``: no tool call; on cancel answers ``cancelled`` and exits.
* ``stubborn``: reports a tool call start, then ignores cancel and SIGTERM.
* ``late``: no tool call; on cancel answers with a result, as a run that finished
  before it saw the cancel.
* ``lost``: the first time (no PIDS_FILE yet), exits 75 at once, as a worker that lost
  its pipe to the daemon; the next time, answers "done after all" and exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from jarvisd.protocol import (
    Cancel,
    ErrorFrame,
    EventFrame,
    FrameReader,
    ResultFrame,
    Start,
    encode,
)
from jarvisd.runs import RunOutcome


def main() -> int:
    mode, pids_file = sys.argv[1], Path(sys.argv[2])
    out = sys.stdout.buffer
    reader = FrameReader(sys.stdin.buffer)
    if not isinstance(reader.read(), Start):
        return 64
    if mode == "lost":
        if not pids_file.exists():
            pids_file.write_text("")
            return 75
        out.write(encode(ResultFrame(result=RunOutcome(answer="done after all").to_dict())))
        out.flush()
        return 0
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Like the real worker, keep the frame pipes to itself (its frames go to a private,
    # non-inheritable copy of stdout).
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL}
    same_group = subprocess.Popen(["sleep", "300"], **quiet)  # type: ignore[call-overload]
    own_session = subprocess.Popen(["sleep", "300"], start_new_session=True, **quiet)  # type: ignore[call-overload]
    if mode in ("tool", "stubborn"):
        start = EventFrame(type="tool_call_start", data={"tool": "shell", "call_id": "c1"})
        out.write(encode(start))
        out.flush()
    tmp = pids_file.with_suffix(".tmp")
    tmp.write_text(f"{same_group.pid} {own_session.pid}")
    tmp.rename(pids_file)
    for frame in reader:
        if isinstance(frame, Cancel) and mode != "stubborn":
            if mode == "late":
                answer = ResultFrame(result=RunOutcome(answer="done anyway").to_dict())
            else:
                answer = ErrorFrame(code="cancelled", message=frame.reason)
            out.write(encode(answer))
            out.flush()
            os._exit(0)  # no cleanup: the subprocesses are left running
    return 75


if __name__ == "__main__":
    sys.exit(main())
