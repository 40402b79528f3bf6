"""Escape E2 of issue 29, on the real engine: CodeAct model code tries to take the
in-container runner over through a module it plants for the next session.

The scripted engine writes the hostile cell: it starts a detached planter (its own
session, so killing the cell's group leaves it) and kills its own REPL session. The
planter drops ``resource.py``, ``site.py``, ``sitecustomize.py``, ``encodings/`` and a
``.pth`` file (with a ``sitecustomize.py``, in the user site too) in every directory it
can write: the runner's working directory (/tmp), the mounted workspace, and each new
session's working directory the moment it appears. The next cell starts a new session.

Every planted module, if anything ever imports it, records who ran it and whether
``setresuid(0, 0, 0)`` worked, in the workspace. None may run; the runner must hold no
root id (its saved uid included), and the code cannot become root.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import AgentSpec, run_spec

from .conftest import sandbox_config
from .test_escape import our_containers

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("engine")]

# What every planted module runs: a marker naming the module, its ids and root or not.
MODULE = """
import os as _os
_ids = _os.getresuid()
try:
    _os.setresuid(0, 0, 0)
    _root = "ROOT"
except OSError:
    _root = "no-root"
for _d in (MARKS, "/tmp"):
    try:
        with open(_d + "/e2-mark-" + NAME + "-" + str(_os.getpid()), "w") as _f:
            _f.write(NAME + " " + repr(_ids) + " " + _root)
    except OSError:
        pass
"""

# The detached planter (runs as the code user, outside the killed session).
PLANTER = r"""
import ctypes, os, struct, sys, time
marks, workspace = sys.argv[1], sys.argv[2]
module = open(sys.argv[3]).read().replace("MARKS", repr(marks))
def body(name):
    return "NAME = %r\n" % name + module
RESOURCE = "\nRLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_AS, RLIMIT_CORE = 0, 1, 6, 9, 4\n" \
    "def setrlimit(*a):\n    pass\ndef getrlimit(*a):\n    return (-1, -1)\n"
PTH = "import os; exec(%r)\n"
def plant(d):
    files = {
        "resource.py": body("resource") + RESOURCE,
        "site.py": body("site"),
        "sitecustomize.py": body("sitecustomize"),
        "usercustomize.py": body("usercustomize"),
        "encodings/__init__.py": body("encodings"),
        "jarvis-e2.pth": PTH % body("pth-cwd"),
        ".local/lib/python3.11/site-packages/jarvis-e2.pth": PTH % body("pth-user"),
        ".local/lib/python3.11/site-packages/sitecustomize.py": body("sitecustomize-user"),
    }
    done = 0
    for rel, text in files.items():
        path = os.path.join(d, rel)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            done += 1
        except OSError:
            pass
    return done
for d in ("/tmp", workspace, os.getcwd()):
    plant(d)
# New sessions' directories, the moment they appear (inotify), then while they stand.
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init()
libc.inotify_add_watch(fd, b"/tmp", 0x100)  # IN_CREATE
os.set_blocking(fd, False)
open(os.path.join(marks, "planter-ready"), "w").close()
seen = set()
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        os.read(fd, 65536)
    except BlockingIOError:
        pass
    for name in os.listdir("/tmp"):
        d = "/tmp/" + name
        if name.startswith("jarvis-exec-") and d not in seen and os.path.isdir(d):
            # Made 0700, opened to the group a moment later: be there at that moment.
            until = time.monotonic() + 2
            while time.monotonic() < until:
                try:
                    with open(d + "/resource.py", "w") as f:
                        f.write(body("resource") + RESOURCE)
                    break
                except OSError:
                    pass
            if plant(d) >= 8:
                seen.add(d)
"""

HOSTILE = """
import os, signal, subprocess, sys
module = open({marks!r} + "/module.txt", "w"); module.write({module!r}); module.close()
planter = open({marks!r} + "/planter.py", "w"); planter.write({planter!r}); planter.close()
subprocess.Popen([sys.executable, {marks!r} + "/planter.py", {marks!r}, {marks!r},
                  {marks!r} + "/module.txt"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
import time
deadline = time.monotonic() + 30
while not os.path.exists({marks!r} + "/planter-ready") and time.monotonic() < deadline:
    time.sleep(0.05)  # the planter has planted what it could, and watches /tmp
os.killpg(os.getpgid(0), signal.SIGKILL)  # the whole session: supervisor, kernel, cell
"""

CHECK = """
import glob, os, time
time.sleep(2)
print("marks", sorted(open(p).read() for p in glob.glob("/tmp/e2-mark-*")))
try:
    os.setresuid(0, 0, 0)
    print("code became root")
except OSError as exc:
    print("code stays", os.getresuid(), exc.errno)
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        uids = [l.split()[1:] for l in open(f"/proc/{pid}/status") if l.startswith("Uid:")][0]
    except (OSError, IndexError):
        continue
    if uids[0] == "10001":
        print("runner uids", uids)
"""


def code(src: str) -> object:
    return reply(f"```python\n{src}\n```")


def test_model_code_cannot_take_over_the_runner_through_a_planted_module(
    roots: tuple[Path, Path],
) -> None:
    _ro, rw = roots
    marks = str(rw.resolve())
    hostile = HOSTILE.format(marks=marks, module=MODULE, planter=PLANTER)
    engine = ScriptedEngine([code(hostile), code(CHECK), reply("Final Answer: done")])
    spec = AgentSpec(
        input="go", agent="native_openhands", isolation="sandbox", mounts=(f"{marks}:rw",)
    )
    outcome = asyncio.run(run_spec(spec, RunContext(), sandbox_config(roots), engine))
    assert not our_containers()
    assert outcome.failure is None, outcome.failure
    # The planter did its part: the modules were written where the code could write.
    assert (rw / "resource.py").exists() and (rw / "encodings" / "__init__.py").exists()
    # No planted module ran, in any process, under any uid.
    ran = sorted(p.read_text() for p in rw.glob("e2-mark-*"))
    assert ran == [], ran
    assert len(outcome.tool_results) == 2, outcome.tool_results
    shown = outcome.tool_results[1].content
    assert "marks []" in shown, shown
    assert "code stays (10002, 10002, 10002) 1" in shown, shown
    # The runner (the one process of uid 10001) holds no root id, saved uid included.
    runner = [line for line in shown.splitlines() if line.startswith("runner uids")]
    assert runner == ["runner uids ['10001', '10001', '10001', '10001']"], shown
