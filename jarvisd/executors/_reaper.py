"""The reaper a host program runs under (``SubprocessExecutor`` without a launcher):
``python -I -S -c REAPER ARGV...``.

A program's process group is not all it leaves: a child that calls ``setsid`` (or
``setsid cmd &``) is in no group of ours, and once its parent is gone it belongs to
init. Such a grandchild kept the program's stdout open, so reading to the end waited
for it whatever the run's wall limit said, and it outlived the run.

The reaper is a child subreaper (``PR_SET_CHILD_SUBREAPER``): whatever the program
starts stays below it, however it detaches. It runs the program as its one child and,
when that child exits or the reaper gets SIGTERM (how the channel stops a program),
kills every process below it and reaps them, then exits as the program did. It keeps
none of the program's pipes open, so their ends close with the last of those processes,
and is not dumpable (the program, of the same uid, cannot open its ``/proc/PID/fd``).

The program itself can still kill the reaper (same user): not a security boundary, as
the rest of this backend (see ``_subprocess``).
"""

from __future__ import annotations

__all__ = ["REAPER"]

REAPER = r"""
import ctypes, os, signal, sys

def below():
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name, "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2:].split()
            parents.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [os.getpid()]
    while todo:
        for child in parents.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found

def kill_below(*_):
    for pid in below():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass

libc = ctypes.CDLL(None)
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the program (same uid) cannot open our fds
signal.signal(signal.SIGTERM, kill_below)
main = os.fork()
if main == 0:
    try:
        os.setpgid(0, 0)  # the program leads a group of its own, as it would unreaped
        os.execvp(sys.argv[1], sys.argv[1:])
    except OSError as exc:
        os.write(2, ("cannot start %s: %s\n" % (sys.argv[1], exc.strerror)).encode())
    os._exit(127)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
status = None
while True:
    try:
        pid, code = os.wait()
    except ChildProcessError:
        break
    if pid == main:
        status = code
    if status is not None:
        kill_below()
if status is None or os.WIFEXITED(status):
    os._exit(0 if status is None else os.WEXITSTATUS(status))
number = os.WTERMSIG(status)
try:
    signal.signal(number, signal.SIG_DFL)
except (OSError, ValueError):
    pass
os.kill(os.getpid(), number)
os._exit(128 + number)
"""
