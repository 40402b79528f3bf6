"""A persistent Python REPL in its own process, driven by frames: the session of the
CodeAct agent and of the RLM agent (their host side is ``jarvisd.agents._repl``).

Standard library plus ``jarvisd.protocol`` only: it also runs inside a bare python3
container where the jarvisd package is mounted read-only.

Processes. A cell that spins in C code, or catches KeyboardInterrupt, can only be
stopped by killing its process; the session's state must survive that. So:

* the **supervisor** (this process, alive for the whole session) reads the host's frames
  on stdin and hands them to the kernel, except ``Cancel``, which it acts on itself: it
  kills the running cell's process and what that process started;
* the **kernel** holds the namespace. For each cell it forks: the child runs the cell
  while the parent waits. When the cell ends, the child reports to the parent, becomes
  the kernel, and the parent exits. When the cell is killed (or its process dies), the
  parent is still there, with the namespace exactly as it was before the cell, and
  says so.

Variables, imports and files therefore persist from cell to cell; a killed cell is rolled
back (its changes to variables are lost, files it wrote stay). Threads a cell starts do
not live on into later cells (a fork keeps only the calling thread).

Protocol (``jarvisd.protocol`` frames on stdin/stdout):

* ``Start(task="init", payload={"max_output_bytes": int, "variables": {name: str},
  "llm": bool})`` once, answered with ``ResultFrame(result={"ok": True})``;
* ``Start(task="exec", payload={"code": str})`` per cell, answered with
  ``ResultFrame(result={"stdout": str, "error": str | None, "final": str | None,
  "killed": str | None})``; ``killed`` says how the cell's process ended when it did
  not finish (the state is then the one from before the cell);
* with ``llm``, the namespace has ``llm_query(prompt, context=None)`` and
  ``llm_batch(prompts)``, which send ``Infer(request={"prompt", "context"})`` frames and
  block for the ``InferResult`` of each, and ``FINAL(value)`` / ``FINAL_VAR(name)``;
* ``Cancel`` kills the running cell (between cells it is ignored).

A cell's output (Python's ``print`` and its child processes' fds 1 and 2) is captured
by the waiting parent, keeping the first ``max_output_bytes`` bytes and counting the
rest, so a cell that prints forever neither blocks nor fills memory. Anything else on
fd 1 goes to stderr so that it can never corrupt the frame stream. Timeouts are the
host's: it sends ``Cancel`` when a cell's time is up.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import selectors
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any

from jarvisd.protocol import (
    MAX_FRAME_BYTES,
    Cancel,
    FrameError,
    FrameReader,
    Infer,
    InferResult,
    ResultFrame,
    Start,
    decode_line,
    encode,
)

#: The most a cell's error text (a traceback) may take in its result.
MAX_ERROR_BYTES = 16 * 1024
#: The report a finished cell sends its waiting parent: error and final, both bounded.
MAX_REPORT_BYTES = 4 * MAX_ERROR_BYTES + MAX_FRAME_BYTES
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


class LLMQueryError(RuntimeError):
    """A sub-call failed on the host (the message says why)."""


class CellCancelled(BaseException):
    pass


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Output:
    """A cell's output in bytes: the first ``limit`` kept, the rest counted."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += data[:room]
        self.dropped += max(len(data) - max(room, 0), 0)

    def text(self) -> str:
        text = self.kept.decode("utf-8", "replace")
        if self.dropped:
            text += f"\n[... output truncated: {self.dropped} more bytes]"
        return text


# -- the kernel ------------------------------------------------------------------------


class Kernel:
    def __init__(self, reader: FrameReader, wire: int, ctl: int, quiet: int) -> None:
        self.reader = reader
        self.wire = wire  # frames to the host
        self.ctl = ctl  # "run PID" / "idle" lines to the supervisor
        self.quiet = quiet  # where fds 1 and 2 point between cells (the session's stderr)
        self.max_output_bytes = 10_000
        self.final: str | None = None
        self.pending: dict[str, InferResult] = {}
        self.cells = 0
        self._write_lock = threading.Lock()
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}

    # -- wire ----------------------------------------------------------------------

    def send(self, frame: Any) -> None:
        with self._write_lock:
            write_all(self.wire, encode(frame))

    def tell_supervisor(self, line: str) -> None:
        write_all(self.ctl, line.encode() + b"\n")

    def _await_results(self, ids: Sequence[str]) -> list[InferResult]:
        wanted = set(ids)
        while not wanted.issubset(self.pending):
            frame = self.reader.read()
            if frame is None:
                raise CellCancelled("the host closed the channel")
            if isinstance(frame, InferResult):
                self.pending[frame.id] = frame
        return [self.pending.pop(i) for i in ids]

    # -- functions available to the cell (with "llm") ----------------------------------

    def llm_query(self, prompt: str, context: str | None = None) -> str:
        """Ask the host's model ``prompt`` (with an optional long ``context``, which the
        host may hand to a nested RLM run when depth allows). Returns its answer."""
        return self.llm_batch([prompt], context=context)[0]

    def llm_batch(self, prompts: Sequence[str], context: str | None = None) -> list[str]:
        """Ask all ``prompts`` at once; the host answers them concurrently."""
        if isinstance(prompts, str):
            raise TypeError("llm_batch takes a list of prompts, not a string")
        frames = []
        for prompt in prompts:
            request: dict[str, Any] = {"prompt": str(prompt)}
            if context is not None:
                request["context"] = str(context)
            frames.append(Infer(request=request))
        for frame in frames:
            self.send(frame)
        answers = []
        for result in self._await_results([f.id for f in frames]):
            if result.error is not None:
                raise LLMQueryError(result.error)
            answers.append(str((result.generation or {}).get("content", "")))
        return answers

    def final_value(self, value: Any) -> Any:
        self.final = str(value)
        return value

    def final_var(self, name: str) -> Any:
        if name not in self.namespace:
            raise NameError(f"FINAL_VAR: no variable named {name!r}")
        value = self.namespace[name]
        self.final = str(value)
        return value

    # -- serving ---------------------------------------------------------------------

    def serve(self) -> None:
        for frame in self.reader:
            if isinstance(frame, Start) and frame.task == "init":
                self.init(frame)
            elif isinstance(frame, Start) and frame.task == "exec":
                self.cell(frame)
            elif isinstance(frame, InferResult):
                self.pending[frame.id] = frame  # late answer to a killed cell

    def init(self, frame: Start) -> None:
        payload = frame.payload
        self.max_output_bytes = int(payload.get("max_output_bytes", self.max_output_bytes))
        variables = payload.get("variables") or {}
        if isinstance(variables, dict):
            self.namespace.update({str(k): v for k, v in variables.items()})
        if payload.get("llm"):
            self.namespace.update(
                llm_query=self.llm_query,
                llm_batch=self.llm_batch,
                FINAL=self.final_value,
                FINAL_VAR=self.final_var,
            )
        cwd = payload.get("cwd")
        if cwd:
            try:
                os.chdir(str(cwd))
            except OSError:
                pass  # the code still runs, from the directory it had
        if payload.get("file_helpers"):
            from runners.file_helpers import HELPERS

            self.namespace.update(HELPERS)
        self.send(ResultFrame(id=frame.id, result={"ok": True}))

    def cell(self, frame: Start) -> None:
        """Fork: the child runs the cell and, when it ends, goes on as the kernel; this
        process waits, then either exits (the child took over) or goes on itself (the
        child was killed: the namespace here is the one from before the cell)."""
        self.cells += 1
        code = str(frame.payload.get("code", ""))
        out_r, out_w = os.pipe()
        report_r, report_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(out_r)
            os.close(report_r)
            self._run_in_child(code, out_w, report_w)
            return  # this process is the kernel now: back to serve()
        os.close(out_w)
        os.close(report_w)
        output = Output(self.max_output_bytes)
        report = _await_cell(pid, out_r, report_r, output)
        if report is not None:  # the child finished the cell and is the kernel now
            self.send(ResultFrame(id=frame.id, result={**report, "stdout": output.text()}))
            os._exit(0)
        self.tell_supervisor("idle")  # before the pid can be reused
        _, status = os.waitpid(pid, 0)
        # The child may have died halfway through a frame: end that line first.
        write_all(self.wire, b"\n")
        result = {
            "stdout": output.text(),
            "error": None,
            "final": None,
            "killed": _how_it_ended(status),
        }
        self.send(ResultFrame(id=frame.id, result=result))

    def _run_in_child(self, code: str, out: int, report: int) -> None:
        self.tell_supervisor(f"run {os.getpid()}")
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        try:
            error = self.run_code(code)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(self.quiet, 1)
            os.dup2(self.quiet, 2)
        # "idle" goes before the report: once the parent may exit, the supervisor must
        # already know that killing this process would kill the session.
        self.tell_supervisor("idle")
        data = {
            "error": _clip(error, MAX_ERROR_BYTES),
            "final": _clip(self.final, MAX_FRAME_BYTES // 2),
        }
        write_all(report, json.dumps(data).encode() + b"\n")
        os.close(report)

    def run_code(self, code: str) -> str | None:
        self.final = None
        filename = f"<cell {self.cells}>"
        try:
            tree = ast.parse(code, filename, "exec")
            last: ast.expr | None = None
            trailing = tree.body[-1] if tree.body else None
            if isinstance(trailing, ast.Expr):
                tree.body.pop()
                last = trailing.value  # show the value of a trailing expression
            exec(compile(tree, filename, "exec"), self.namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last), filename, "eval"), self.namespace)
                if value is not None:
                    print(repr(value))
        except CellCancelled as exc:
            return f"cancelled: {exc}"
        except BaseException as exc:
            return _format_error(exc, filename)
        return None


def _await_cell(pid: int, out: int, report: int, output: Output) -> dict[str, Any] | None:
    """Collect the cell's output until it reports (its report) or dies (None)."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):  # older kernels: look with waitpid instead
        pidfd = None
    os.set_blocking(out, False)
    selector = selectors.DefaultSelector()
    selector.register(out, selectors.EVENT_READ)
    selector.register(report, selectors.EVENT_READ)
    if pidfd is not None:
        selector.register(pidfd, selectors.EVENT_READ)
    data = bytearray()
    dead = False
    try:
        while True:
            for key, _ in selector.select(None if pidfd is not None else 0.05):
                if key.fd == out:
                    _read_into(out, output, selector)
                elif key.fd == report:
                    chunk = os.read(report, 65536)
                    if not chunk or len(data) > MAX_REPORT_BYTES:
                        selector.unregister(report)
                        dead = True  # no report will come
                    data += chunk
                else:
                    dead = True
            if data.endswith(b"\n"):
                break
            if dead or (pidfd is None and os.waitpid(pid, os.WNOHANG)[0] == pid):
                _drain(out, output)
                return None
        # The child restored its fds before reporting: what it printed is in the pipe
        # (children it left behind may still write; that is theirs to lose).
        _drain(out, output)
        try:
            report_data = json.loads(data)
        except ValueError:
            return {"error": "the cell's report could not be read", "final": None, "killed": None}
        return {
            "error": report_data.get("error"),
            "final": report_data.get("final"),
            "killed": None,
        }
    finally:
        selector.close()
        for fd in (out, report, pidfd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


def _read_into(fd: int, output: Output, selector: selectors.BaseSelector) -> None:
    try:
        chunk = os.read(fd, 65536)
    except BlockingIOError:
        return
    if chunk:
        output.add(chunk)
    else:
        selector.unregister(fd)


def _drain(fd: int, output: Output) -> None:
    with contextlib.suppress(OSError):
        while chunk := os.read(fd, 65536):
            output.add(chunk)


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(number).name}"
        return f"killed by signal {number}"
    return f"the cell's process exited with status {os.waitstatus_to_exitcode(status)}"


def _clip(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore") + f"\n[... {len(data) - limit} more bytes]"


def _format_error(exc: BaseException, filename: str) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<cell")]
    lines = traceback.format_list(frames[-5:])
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines).rstrip()


# -- the supervisor ----------------------------------------------------------------------


class Supervisor:
    """Relays the host's frames to the kernel and kills cells on ``Cancel``."""

    def __init__(self, stdin: int, to_kernel: int, ctl: int, alive: int) -> None:
        self.stdin = stdin
        self.to_kernel = to_kernel
        self.ctl = ctl
        self.alive = alive
        self.inbox = bytearray()  # from the host, not yet split into lines
        self.outbox = bytearray()  # for the kernel, not yet written
        self.ctl_buf = bytearray()
        self.cell_asked = False  # an exec frame went to the kernel, its cell not yet idle
        self.cell_pid: int | None = None
        self.kill_pending = False
        self.selector = selectors.DefaultSelector()

    def serve(self) -> None:
        os.set_blocking(self.to_kernel, False)
        os.set_blocking(self.ctl, False)
        self.selector.register(self.stdin, selectors.EVENT_READ, "stdin")
        self.selector.register(self.ctl, selectors.EVENT_READ, "ctl")
        self.selector.register(self.alive, selectors.EVENT_READ, "alive")
        while True:
            events = self.selector.select()
            for key, _ in sorted(events, key=lambda e: e[0].data != "ctl"):  # ctl first
                if key.data == "ctl":
                    self.read_ctl()
                elif key.data == "stdin":
                    chunk = os.read(self.stdin, 65536)
                    if not chunk:
                        return  # the host is done with the session
                    self.inbox += chunk
                    self.split_inbox()
                elif key.data == "kernel":
                    self.flush_outbox()
                elif key.data == "alive":
                    return  # no kernel is left (it was killed from outside)
            self.reap()

    def split_inbox(self) -> None:
        while True:
            end = self.inbox.find(b"\n")
            if end < 0:
                if len(self.inbox) > MAX_FRAME_BYTES:  # the kernel's reader refuses it
                    self.forward(bytes(self.inbox))
                    self.inbox.clear()
                return
            line = bytes(self.inbox[: end + 1])
            del self.inbox[: end + 1]
            try:
                frame = decode_line(line)
            except FrameError:
                frame = None
            if isinstance(frame, Cancel):
                self.cancel()
                continue
            if isinstance(frame, Start) and frame.task == "exec":
                self.cell_asked = True
            self.forward(line)

    def forward(self, data: bytes) -> None:
        if not self.outbox:
            self.selector.register(self.to_kernel, selectors.EVENT_WRITE, "kernel")
        self.outbox += data
        self.flush_outbox()

    def flush_outbox(self) -> None:
        try:
            written = os.write(self.to_kernel, self.outbox)
        except BlockingIOError:
            return
        except BrokenPipeError:
            written = len(self.outbox)  # the kernel is gone: "alive" ends the session
        del self.outbox[:written]
        if not self.outbox:
            self.selector.unregister(self.to_kernel)

    def read_ctl(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.ctl, 4096):
                self.ctl_buf += chunk
        while (end := self.ctl_buf.find(b"\n")) >= 0:
            word, _, arg = bytes(self.ctl_buf[:end]).decode().partition(" ")
            del self.ctl_buf[: end + 1]
            if word == "run" and arg.isdigit():
                self.cell_pid = int(arg)
                if self.kill_pending:
                    self.kill_cell()
            elif word == "idle":
                self.cell_pid, self.cell_asked, self.kill_pending = None, False, False

    def cancel(self) -> None:
        # A cell that has already reported "idle" must not be killed (it may be the
        # kernel by now): read what the kernel said before acting.
        self.read_ctl()
        if self.cell_pid is not None:
            self.kill_cell()
        elif self.cell_asked:
            self.kill_pending = True  # its process has not said its pid yet

    def kill_cell(self) -> None:
        pid, self.kill_pending = self.cell_pid, False
        if pid is None:
            return
        for victim in [pid, *_descendants(pid)]:
            with contextlib.suppress(OSError):
                os.kill(victim, signal.SIGKILL)

    def reap(self) -> None:
        # As the subreaper, finished kernels (each exits when its child takes over)
        # become our children: reap them, or they stay zombies for the session.
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass


def _descendants(pid: int) -> list[int]:
    """The processes started below ``pid`` (read from /proc: best effort)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            # The command name may hold spaces and parentheses: fields follow the last ")".
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) > 1 and fields[1].isdigit():
                children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(Exception):  # no ctypes, no prctl: see the callers
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def main() -> int:
    # Frames go to the original stdout; fd 1 becomes stderr so that stray output from C
    # code or child processes cannot corrupt the protocol.
    wire = os.dup(1)
    os.dup2(2, 1)
    to_kernel_r, to_kernel_w = os.pipe()
    ctl_r, ctl_w = os.pipe()
    alive_r, alive_w = os.pipe()  # every kernel holds alive_w: EOF when none is left
    # Finished kernels become our children, to be reaped (else they wait for init).
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    # Not dumpable, like the sandbox runner: a cell's code (same uid) cannot open the
    # supervisor's or a waiting kernel's /proc/PID/fd, nor ptrace them. Cells inherit
    # it; what they exec does not (an exec resets it).
    _prctl(_PR_SET_DUMPABLE, 0)
    pid = os.fork()
    if pid == 0:
        for fd in (to_kernel_w, ctl_r, alive_r):
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # stdin is the supervisor's: a cell must never read frames
        os.close(null)
        quiet = os.dup(2)
        sys.stdout = io.TextIOWrapper(
            os.fdopen(1, "wb", buffering=0, closefd=False), write_through=True
        )
        sys.stderr = io.TextIOWrapper(
            os.fdopen(2, "wb", buffering=0, closefd=False), write_through=True
        )
        reader = FrameReader(os.fdopen(to_kernel_r, "rb"))
        try:
            Kernel(reader, wire, ctl_w, quiet).serve()
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    for fd in (to_kernel_r, ctl_w, alive_w, wire):
        os.close(fd)
    supervisor = Supervisor(sys.stdin.fileno(), to_kernel_w, ctl_r, alive_r)
    try:
        supervisor.serve()
    except KeyboardInterrupt:
        return 130
    finally:
        # The session is over: nothing the cells started outlives it.
        for victim in _descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(victim, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
