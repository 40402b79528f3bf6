"""The RLM REPL: a persistent Python namespace in its own process, driven by frames.

Standard library plus ``jarvisd.protocol`` only: it also runs inside a bare python3
container where the jarvisd package is mounted read-only.

Protocol (``jarvisd.protocol`` frames on stdin/stdout):

* host -> REPL ``Start(task="init", payload={"context": str, "question": str,
  "max_output_chars": int})``
  once, answered with ``ResultFrame(result={"ok": True})``;
* host -> REPL ``Start(task="exec", payload={"code": str})`` per step, answered with
  ``ResultFrame(result={"stdout": str, "error": str | None, "final": str | None})``;
* inside a cell, ``llm_query(prompt, context=None)`` sends ``Infer(request={"prompt":
  ..., "context": ...})`` and blocks for the ``InferResult`` with the same id;
  ``llm_batch(prompts)`` sends every Infer first and then waits for all (the host
  answers them concurrently);
* ``Cancel`` aborts the waiting cell.

The namespace holds ``context``, ``llm_query``, ``llm_batch``, ``FINAL(value)`` and
``FINAL_VAR(name)``. Output of a cell is captured and cut at ``max_output_chars``.
Anything else the process writes to fd 1 is redirected to stderr so it can never
corrupt the frame stream. Timeouts are the host's job: it kills the process.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, BinaryIO

from jarvisd.protocol import Cancel, FrameReader, Infer, InferResult, ResultFrame, Start, encode


class LLMQueryError(RuntimeError):
    """A sub-call failed on the host (the message says why)."""


class CellCancelled(BaseException):
    pass


class Repl:
    def __init__(self, reader: FrameReader, wire: BinaryIO) -> None:
        self.reader = reader
        self.wire = wire
        self.max_output_chars = 10_000
        self.final: str | None = None
        self.pending: dict[str, InferResult] = {}
        self.cells = 0
        self.namespace: dict[str, Any] = {
            "__name__": "__repl__",
            "llm_query": self.llm_query,
            "llm_batch": self.llm_batch,
            "FINAL": self.final_value,
            "FINAL_VAR": self.final_var,
            "context": "",
            "question": "",
        }

    # -- wire ----------------------------------------------------------------------

    def send(self, frame: Any) -> None:
        self.wire.write(encode(frame))
        self.wire.flush()

    def _await_results(self, ids: Sequence[str]) -> list[InferResult]:
        wanted = set(ids)
        while not wanted.issubset(self.pending):
            frame = self.reader.read()
            if frame is None:
                raise CellCancelled("the host closed the channel")
            if isinstance(frame, InferResult):
                self.pending[frame.id] = frame
            elif isinstance(frame, Cancel):
                raise CellCancelled(frame.reason or "cancelled")
        return [self.pending.pop(i) for i in ids]

    # -- functions available to the cell ---------------------------------------------

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

    # -- running cells -----------------------------------------------------------------

    def run_cell(self, code: str) -> dict[str, Any]:
        self.cells += 1
        self.final = None
        filename = f"<cell {self.cells}>"
        out = io.StringIO()
        error: str | None = None
        try:
            tree = ast.parse(code, filename, "exec")
            last: ast.expr | None = None
            trailing = tree.body[-1] if tree.body else None
            if isinstance(trailing, ast.Expr):
                tree.body.pop()
                last = trailing.value  # show the value of a trailing expression
            with contextlib.redirect_stdout(out):
                exec(compile(tree, filename, "exec"), self.namespace)
                if last is not None:
                    value = eval(compile(ast.Expression(last), filename, "eval"), self.namespace)
                    if value is not None:
                        print(repr(value))
        except CellCancelled as exc:
            error = f"cancelled: {exc}"
        except BaseException as exc:
            error = _format_error(exc, filename)
        text = out.getvalue()
        limit = self.max_output_chars
        if len(text) > limit:
            text = text[:limit] + f"\n[... output truncated: {len(text) - limit} more characters]"
        return {"stdout": text, "error": error, "final": self.final}

    def serve(self) -> None:
        for frame in self.reader:
            if isinstance(frame, Start) and frame.task == "init":
                self.namespace["context"] = frame.payload.get("context", "")
                self.namespace["question"] = frame.payload.get("question", "")
                self.max_output_chars = int(
                    frame.payload.get("max_output_chars", self.max_output_chars)
                )
                self.send(ResultFrame(id=frame.id, result={"ok": True}))
            elif isinstance(frame, Start) and frame.task == "exec":
                result = self.run_cell(str(frame.payload.get("code", "")))
                self.send(ResultFrame(id=frame.id, result=result))
            elif isinstance(frame, InferResult):
                self.pending[frame.id] = frame  # late answer to a cancelled cell


def _format_error(exc: BaseException, filename: str) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<cell")]
    lines = traceback.format_list(frames[-5:])
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines).rstrip()


def main() -> int:
    # Frames go to the original stdout; fd 1 becomes stderr so that stray output from C
    # code or child processes cannot corrupt the protocol.
    wire = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
    repl = Repl(FrameReader(sys.stdin.buffer), wire)
    try:
        repl.serve()
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
