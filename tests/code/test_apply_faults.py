"""`jarvis code apply` under faults, through the real CLI in a real process: killed at
random points (SIGKILL, SIGTERM, SIGINT) while it applies a 200-file change, and on a
disk that fills up half way. After the next `jarvis code` command the project must be
byte for byte the old tree or the new one (every file hashed, every directory listed),
with no temporary or backup left, and the workspace's record must agree with it."""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from jarvisd._paths import paths
from jarvisd.code import CodeStore, Workspace, prepare
from jarvisd.code._workspace import snapshot, workspace_root
from tests.conftest import require

from .conftest import FIXED, tree_hashes

TRIALS = 100
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)


def store() -> CodeStore:
    return CodeStore(paths().state / "code.db")


def jarvis(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvisd", *args], capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())  # fmt: skip


# The forking parent: it imports the CLI and the code commands once, then forks one
# child per command. Each child runs what `python -m jarvisd ARGS` runs (main, then
# exit with its code), with fresh stdio and the signal dispositions of a new
# interpreter: only the interpreter's start and the imports are skipped, which were
# most of each trial's time. Commands on stdin, one a line: ``run OUT ERR ARGV-JSON``
# answers the child's pid; ``wait PID`` its return code (as Popen's: -N for signal N).
_FORKER = r"""
import json, os, sys
import jarvisd.cli, jarvisd.cli._code, jarvisd.code, jarvisd.code._apply
import jarvisd.code._recover, jarvisd.code._journal
from jarvisd.cli import main

for line in sys.stdin:
    verb, rest = line.split(" ", 1)
    if verb == "wait":
        status = os.waitpid(int(rest), 0)[1]
        print(os.waitstatus_to_exitcode(status), flush=True)
        continue
    out, err, argv = rest.split(" ", 2)
    pid = os.fork()
    if pid == 0:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
        os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
        code = main(json.loads(argv))
        sys.exit(code if isinstance(code, int) else 0)
    print(pid, flush=True)
"""


class Forked:
    """One command run by the forking parent, with the part of Popen's interface the
    trials use: ``pid``, ``poll``, ``send_signal``, ``communicate``, ``returncode``."""

    def __init__(self, forker: Forker, pid: int, out: Path, err: Path) -> None:
        self.forker, self.pid, self.out, self.err = forker, pid, out, err
        self.returncode: int | None = None

    def poll(self) -> int | None:
        # The child is the forker's, not ours: it has ended once it is a zombie.
        if self.returncode is None:
            try:
                ended = psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                ended = True
            if ended:
                self.returncode = self.forker.wait(self.pid)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def communicate(self, timeout: float) -> tuple[bytes, bytes]:
        if self.returncode is None:
            self.returncode = self.forker.wait(self.pid, timeout)
        return self.out.read_bytes(), self.err.read_bytes()


class Forker:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0
        self.proc = subprocess.Popen([sys.executable, "-c", _FORKER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=os.environ.copy())  # fmt: skip

    def _ask(self, line: str, timeout: float = 120) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"the forking parent did not answer {line!r} within {timeout} s"
        answer = self.proc.stdout.readline().decode().strip()
        assert answer, f"the forking parent ended (exit {self.proc.poll()})"
        return answer

    def start(self, *args: str) -> Forked:
        self.count += 1
        out, err = self.root / f"{self.count}.out", self.root / f"{self.count}.err"
        pid = int(self._ask(f"run {out} {err} {json.dumps(list(args))}"))
        return Forked(self, pid, out, err)

    def wait(self, pid: int, timeout: float = 120) -> int:
        return int(self._ask(f"wait {pid}", timeout))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        child = self.start(*args)
        out, err = child.communicate(timeout=120)
        return subprocess.CompletedProcess(list(args), child.poll() or 0, out.decode(),
                                           err.decode())  # fmt: skip

    def close(self) -> None:
        self.proc.kill()
        self.proc.communicate(timeout=10)  # and closes the pipes


def state_of(root: Path) -> tuple[dict[str, str], list[str]]:
    """Every file's hash and every directory (an empty new one counts), .git aside."""
    dirs = sorted(
        os.path.relpath(os.path.join(d, n), root)
        for d, names, _ in os.walk(root)
        for n in names
        if n != ".git"
    )
    return tree_hashes(root), dirs


def leftovers(root: Path) -> list[str]:
    return [
        os.path.join(d, n)
        for d, names, files in os.walk(root)
        for n in names + files
        if ".jarvis-" in n or n.endswith(".orig")
    ]


def count(outcomes: dict[str, int], kind: str) -> None:
    outcomes[kind] = outcomes.get(kind, 0) + 1


def make_change(project: Path) -> Workspace:
    """A project of 190 files, and a workspace whose change touches 200: 160 modified,
    20 deleted, 20 new (10 in new nested directories)."""
    rng = random.Random(7)
    for i in range(190):
        where = project / ("" if i < 100 else f"src/m{i % 5}") / f"f{i:03}.txt"
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_bytes(rng.randbytes(2048).hex().encode())
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="t")
    tree = Path(ws.path)
    files = sorted(p for p in tree.rglob("f*.txt"))
    for path in files[:160]:
        path.write_bytes(b"new " + path.read_bytes()[::-1])
    for path in files[160:180]:
        path.unlink()
    for i in range(20):
        where = tree / ("" if i < 10 else f"new/deep{i % 3}/more") / f"n{i:03}.txt"
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_bytes(rng.randbytes(1024).hex().encode())
    change = snapshot(ws)
    assert len(change.files) == 200
    # One pack instead of hundreds of object directories: each reset copies it faster.
    subprocess.run(["git", f"--git-dir={ws.git_dir}", "repack", "-adq"], check=True)
    subprocess.run(["git", f"--git-dir={ws.git_dir}", "prune-packed"], check=True)
    files_out = [{"status": s, "path": p} for s, p in change.files]
    return store().update(ws, state="done", outcome={"result": change.result, "files": files_out})


class Fixture:
    """The project and the workspace, reset quickly before each trial: both are put
    back as hard links of pristine copies (apply never writes into a file: it writes
    new files and renames them, so the pristine inodes are never changed)."""

    def __init__(self, root: Path, project: Path, ws: Workspace) -> None:
        self.project, self.ws = project, ws
        self.old_project = root / "old-project"
        self.ws_root = workspace_root(paths().state, ws.id)
        self.old_ws_root = root / "old-workspace"
        shutil.copytree(project, self.old_project, symlinks=True)
        shutil.copytree(self.ws_root, self.old_ws_root, symlinks=True)

    def reset(self) -> None:
        pairs = [(self.project, self.old_project)]
        if store().get(self.ws.id).state == "applied":  # else the workspace is intact
            pairs.append((self.ws_root, self.old_ws_root))
        for live, pristine in pairs:
            shutil.rmtree(live, ignore_errors=True)
            shutil.copytree(pristine, live, symlinks=True, copy_function=os.link)
        store().put(self.ws)

    def wait_first_temporary(self, proc: Forked) -> None:
        # The change's first files (in git's order) are at the top of the project.
        deadline = time.monotonic() + 60
        while not any(".jarvis-" in n for n in os.listdir(self.project)):
            if proc.poll() is not None:
                return
            assert time.monotonic() < deadline, "no temporary file appeared"
            time.sleep(0.001)


@pytest.fixture
def change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fixture]:
    """The project and the state directory on a memory file system when there is one:
    a kill hits the same page cache either way, but a loaded disk makes each of the
    apply's fsyncs (one per file) cost milliseconds, hundreds of trials too slow."""
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(dir=shm)) if os.access(shm, os.W_OK) else tmp_path
    try:
        monkeypatch.setenv("JARVIS_STATE_DIR", str(root / "state"))
        project = root / "project"
        project.mkdir()
        yield Fixture(root, project, make_change(project))
    finally:
        if root != tmp_path:
            shutil.rmtree(root, ignore_errors=True)


def test_random_kills_leave_the_old_or_the_new_tree_after_the_next_command(
    change: Fixture,
) -> None:
    (change.old_project.parent / "forked").mkdir()
    forker = Forker(change.old_project.parent / "forked")
    try:
        _random_kills(change, forker)
    finally:
        forker.close()


def _random_kills(change: Fixture, forker: Forker) -> None:
    old = state_of(change.project)
    # One apply without a signal: the new tree, and how long its writing takes here.
    proc = forker.start("code", "apply", change.ws.id)
    change.wait_first_temporary(proc)
    began = time.monotonic()
    first_err = proc.communicate(timeout=120)[1]
    window = time.monotonic() - began
    assert proc.returncode == 0, first_err
    new = state_of(change.project)
    assert new != old and not leftovers(change.project)
    rng = random.Random(int(os.environ.get("JARVIS_FAULT_SEED", "38")))
    outcomes: dict[str, int] = {}
    failures = []
    for trial in range(TRIALS):
        change.reset()
        sig = SIGNALS[trial % 3]
        proc = forker.start("code", "apply", change.ws.id)
        if rng.random() < 0.15:  # anywhere from start-up through planning
            time.sleep(rng.uniform(0.0, 0.4))
        else:  # somewhere while temporaries, backups and renames happen, or after
            change.wait_first_temporary(proc)
            time.sleep(rng.uniform(0.0, window))
        if proc.poll() is None:
            proc.send_signal(sig)
        else:  # too late: aim earlier from now on
            window *= 0.8
            count(outcomes, "ended before the signal")
        proc.communicate(timeout=120)
        after = forker.run("code", "list")
        assert after.returncode == 0, after.stderr
        for said, label in (("rolled back the interrupted", "next command rolled back"),
                            ("completed the interrupted", "next command completed")):  # fmt: skip
            if said in after.stderr:
                count(outcomes, label)
        now = state_of(change.project)
        applied = store().get(change.ws.id).state == "applied"
        kind = "new" if now == new else "old" if now == old else "mixed"
        left = leftovers(change.project)
        count(outcomes, kind)
        # Keep aiming where both ways out come: a kill that landed after the commit point
        # pulls the window in, one before it pushes it out (an apply's pace drifts with
        # the machine's load, and one first timing can be far off).
        window *= 0.97 if kind == "new" else 1.03 if kind == "old" else 1.0
        if kind == "mixed" or left or applied != (kind == "new"):
            failures.append(f"trial {trial} ({sig.name}): {kind}, applied={applied}, "
                            f"{len(left)} left over, e.g. {left[:2]}")  # fmt: skip
    print(f"outcomes of {TRIALS} trials: {outcomes}")
    assert not failures, f"{len(failures)} of {TRIALS} trials failed:\n" + "\n".join(failures)
    # Both ways out were seen: the random points fell before and after the commit point.
    assert outcomes.get("old", 0) > 5 and outcomes.get("new", 0) > 5, outcomes


def test_a_disk_that_fills_up_mid_apply_leaves_nothing_behind(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True
    ).returncode == 0  # fmt: skip
    require(mounted, "mounting a small tmpfs needs root (CI runs as root)")
    try:
        project = disk / "project"
        project.mkdir()
        for i in range(40):
            (project / f"f{i:02}.txt").write_bytes(b"o" * 8192)
        ws = prepare(str(project), store=store(), state_dir=paths().state, task="t")
        tree = Path(ws.path)
        (tree / "a-new" / "deeper").mkdir(parents=True)
        (tree / "a-new" / "deeper" / "first.txt").write_bytes(b"n" * 8192)
        for i in range(40):
            (tree / f"f{i:02}.txt").write_bytes(b"n" * 20000)  # 40 x 20 KB do not fit
        change = snapshot(ws)
        files = [{"status": s, "path": p} for s, p in change.files]
        ws = store().update(ws, state="done", outcome={"result": change.result, "files": files})
        old = state_of(project)

        done = jarvis("code", "apply", ws.id)
        said = done.stderr
        assert done.returncode == 1, said
        assert not leftovers(project), said
        assert state_of(project) == old, said  # no new directory a-new/ either
        assert "No space left on device" in said and "every temporary file" in said, said
        assert store().get(ws.id).state == "done"

        subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)
        done = jarvis("code", "apply", ws.id)
        assert done.returncode == 0
        assert (project / "a-new" / "deeper" / "first.txt").read_bytes() == b"n" * 8192
        assert (project / "f39.txt").read_bytes() == b"n" * 20000
        assert not leftovers(project)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def killed_apply(ws_id: str, setup: str) -> subprocess.CompletedProcess[str]:
    """`jarvis code apply` in a process that SIGKILLs itself where ``setup`` says
    (Python run before the CLI, with ``die()`` at hand)."""
    code = (
        "import os, signal\n"
        "def die(*a, **k): os.kill(os.getpid(), signal.SIGKILL)\n"
        f"{setup}\n"
        "from jarvisd.cli import main\n"
        f"main(['code', 'apply', {ws_id!r}])\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=os.environ.copy())  # fmt: skip


def small_change(project: Path) -> Workspace:
    ws = prepare(str(project), store=store(), state_dir=paths().state, task="t")
    (Path(ws.path) / "calc.py").write_text(FIXED)
    (Path(ws.path) / "pkg" / "sub").mkdir(parents=True)
    (Path(ws.path) / "pkg" / "sub" / "new.py").write_text("new\n")
    (Path(ws.path) / "test_calc.py").unlink()
    change = snapshot(ws)
    files = [{"status": s, "path": p} for s, p in change.files]
    return store().update(ws, state="done", outcome={"result": change.result, "files": files})


# os.replace is called by the journal's own writes too; these count only the renames
# into the project (a temporary's name holds ".jarvis-").
_NTH_RENAME = """
import os
real, seen = os.replace, []
def replace(src, dst, **kw):
    if ".jarvis-" in str(src):
        seen.append(src)
        if len(seen) == {n}:
            die()
    return real(src, dst, **kw)
os.replace = replace
"""


@pytest.mark.parametrize("n", [1, 2])
def test_a_kill_at_the_nth_rename_is_completed_by_the_next_command(project: Path, n: int) -> None:
    ws = small_change(project)
    killed = killed_apply(ws.id, _NTH_RENAME.format(n=n))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    shown = jarvis("code", "show", ws.id)
    assert shown.returncode == 0, shown.stderr
    assert "completed the interrupted apply" in shown.stderr
    assert (project / "calc.py").read_text() == FIXED
    assert (project / "pkg" / "sub" / "new.py").read_text() == "new\n"
    assert not (project / "test_calc.py").exists() and not leftovers(project)
    assert store().get(ws.id).state == "applied"
    assert not workspace_root(paths().state, ws.id).exists()


def test_a_kill_while_writing_a_temporary_is_rolled_back(project: Path) -> None:
    ws = small_change(project)
    before = state_of(project)
    # fsyncs: the journal, its directory, then the first temporary: killed there.
    setup = "import os\nreal, n = os.fsync, []\ndef fsync(fd):\n    n.append(fd)\n" \
            "    return die() if len(n) == 3 else real(fd)\nos.fsync = fsync"  # fmt: skip
    killed = killed_apply(ws.id, setup)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert leftovers(project)  # the temporary, and the new directory, are there
    listed = jarvis("code", "list")
    assert "rolled back the interrupted apply" in listed.stderr
    assert state_of(project) == before and not leftovers(project)
    assert jarvis("code", "apply", ws.id).returncode == 0
    assert (project / "calc.py").read_text() == FIXED and not leftovers(project)


def test_a_kill_after_the_record_says_applied_is_finished_and_explained(project: Path) -> None:
    ws = small_change(project)
    setup = "import jarvisd.code._workspace as w\nw.discard = die"
    killed = killed_apply(ws.id, setup)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    again = jarvis("code", "apply", ws.id)
    assert again.returncode == 1
    assert "applied already" in again.stderr and f"jarvis code show {ws.id}" in again.stderr
    assert (project / "calc.py").read_text() == FIXED and not leftovers(project)
    assert not workspace_root(paths().state, ws.id).exists()  # removed by the recovery


def test_sigterm_before_the_commit_point_rolls_back_at_once(project: Path) -> None:
    ws = small_change(project)
    before = state_of(project)
    # SIGTERM arrives while the second temporary is written.
    setup = (
        "import os, signal\nreal, n = os.fsync, []\n"
        "def fsync(fd):\n    n.append(fd)\n"
        "    if len(n) == 3: os.kill(os.getpid(), signal.SIGTERM)\n    return real(fd)\n"
        "os.fsync = fsync"
    )
    done = killed_apply(ws.id, setup)
    assert done.returncode == 130, done.stderr
    assert "interrupted by SIGTERM" in done.stderr and "every file was put back" in done.stderr
    assert state_of(project) == before and not leftovers(project)
    assert not list((paths().state / "code-apply").glob("*.json"))
