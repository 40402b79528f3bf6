"""Small, checked file helpers for a CodeAct session (the agent-computer interface that
SWE-agent and OpenHands found small models need), put in the REPL's namespace:

- ``view(path, start=1, end=None)``: the file's lines with their numbers, a window at a time;
- ``replace(path, old, new)``: replace one exact snippet; refused, with what to do
  instead, when it occurs 0 times or more than once;
- ``run(command, timeout=120)``: a shell command's exit status and output (its tail);
- ``define_in(path, code)``: the functions and classes ``code`` defines, put in place of
  those of the same names in the file (jarvis code's CodeAct calls it for a block that
  only defines code under a file's name: the fixed function a small model shows).

They print what happened (a model reads its cell's output, not return values) and never
raise for a mistake the model made: the message says what to do. Everything they print
is bounded. Standard library only: this runs in the sandbox image.
"""

from __future__ import annotations

import ast
import os
import subprocess
import tempfile

__all__ = ["HELPERS", "define_in", "replace", "run", "view"]

#: The most lines ``view`` shows at once, and the most bytes of a file the helpers read.
VIEW_LINES = 200
MAX_FILE_BYTES = 2 * 1024 * 1024
#: The most of a command's output ``run`` prints (its tail).
RUN_OUTPUT_BYTES = 8000
_CONTEXT = 3


def _read(path: str, who: str) -> str | None:
    try:
        size = os.stat(path).st_size
        if os.path.isdir(path):
            names = sorted(os.listdir(path))[:100]
            print(f"{who}: {path} is a directory; it holds: {', '.join(names)}")
            return None
        if size > MAX_FILE_BYTES:
            print(f"{who}: {path} holds {size} bytes, more than {MAX_FILE_BYTES}: too large")
            return None
        with open(path, encoding="utf-8", errors="replace", newline="") as handle:
            return handle.read()
    except FileNotFoundError:
        print(f"{who}: no such file: {path}")
    except OSError as exc:
        print(f"{who}: cannot read {path}: {exc.strerror}")
    return None


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(
        f"{n:>5}  {line.rstrip(chr(10)).rstrip(chr(13))}" for n, line in enumerate(lines, first)
    )


def view(path: str, start: int = 1, end: int | None = None) -> None:
    """Print lines ``start`` to ``end`` (1-based, inclusive) of ``path``, numbered; at
    most VIEW_LINES at once."""
    text = _read(str(path), "view")
    if text is None:
        return
    lines = text.splitlines(keepends=True)
    total = len(lines)
    start = max(1, int(start))
    last = total if end is None else min(total, int(end))
    last = min(last, start + VIEW_LINES - 1)
    if total == 0:
        print(f"{path}: empty file")
        return
    if start > total:
        print(f"view: {path} has {total} lines; start at 1 to {total}")
        return
    print(f"{path} (lines {start}-{last} of {total}):")
    print(_numbered(lines[start - 1 : last], start))
    if last < total and (end is None or last < int(end)):
        print(f"[more: view({str(path)!r}, {last + 1})]")


def replace(path: str, old: str, new: str) -> None:
    """Replace the one occurrence of ``old`` in ``path`` with ``new``."""
    path, old, new = str(path), str(old), str(new)
    if not old:
        print("replace: old is empty: give the exact lines to replace")
        return
    text = _read(path, "replace")
    if text is None:
        return
    count = text.count(old)
    if count == 0:
        hint = ""
        if text.count(old.strip()) == 1:
            hint = " (it is there without the leading or trailing whitespace you gave)"
        print(
            f"replace: 0 matches of the snippet in {path}{hint}: nothing was changed. "
            "view the file and copy the lines exactly, indentation included."
        )
        return
    if count > 1:
        at: list[int] = []
        index = text.find(old)
        while index >= 0 and len(at) < 10:
            at.append(index)
            index = text.find(old, index + 1)
        lines = [str(text.count("\n", 0, i) + 1) for i in at]
        print(
            f"replace: the snippet occurs {count} times in {path} (at lines "
            f"{', '.join(lines)}): nothing was changed. Include more lines around it so "
            "that it occurs once."
        )
        return
    index = text.find(old)
    changed = text[:index] + new + text[index + len(old) :]
    try:
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(changed)
    except OSError as exc:
        print(f"replace: cannot write {path}: {exc.strerror}")
        return
    first = text.count("\n", 0, index) + 1
    lines = changed.splitlines(keepends=True)
    shown_from = max(1, first - _CONTEXT)
    shown_to = min(len(lines), first + new.count("\n") + _CONTEXT)
    print(f"replaced 1 snippet in {path}; lines {shown_from}-{shown_to} now:")
    print(_numbered(lines[shown_from - 1 : shown_to], shown_from))


def run(command: str, timeout: float = 120, cwd: str | None = None) -> None:
    """Run ``command`` with /bin/sh (in ``cwd``); print its exit status and its
    output's tail. The output goes to a temporary file, never whole into memory."""
    with tempfile.TemporaryFile() as out:
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", str(command)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=float(timeout),
                cwd=cwd,
                check=False,
            )
            status = f"[exit {done.returncode}]"
        except subprocess.TimeoutExpired:
            status = f"[{command!r} did not end within {float(timeout):g} s and was stopped]"
        except OSError as exc:  # no such cwd
            print(f"run: cannot run {command!r}: {exc.strerror}")
            return
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - RUN_OUTPUT_BYTES))
        tail = out.read().decode("utf-8", "replace")
    if size > RUN_OUTPUT_BYTES:
        tail = f"[... {size - RUN_OUTPUT_BYTES} bytes of output left out ...]\n" + tail
    if tail.strip():
        print(tail.rstrip("\n"))
    print(status)


def _defs(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    return {
        node.name: node
        for node in body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


def _span(node: ast.stmt, decorators: bool = True) -> tuple[int, int]:
    """The 0-based first line (its decorators included, unless told not) and end line
    of a definition."""
    found = getattr(node, "decorator_list", ()) if decorators else ()
    first = min([node.lineno, *(d.lineno for d in found)])
    return first - 1, node.end_lineno or node.lineno


def _target(old: ast.stmt, new: ast.stmt) -> tuple[int, int]:
    """The lines of ``old`` that ``new`` takes: with its decorators only when ``new``
    has some (a function shown without them keeps the file's)."""
    return _span(old, decorators=bool(getattr(new, "decorator_list", ())))


def _segment(lines: list[str], node: ast.stmt, indent: int) -> list[str]:
    """``node``'s lines, re-indented from its own column to ``indent``."""
    first, end = _span(node)
    shift = indent - node.col_offset
    out = []
    for line in lines[first:end]:
        if shift > 0 and line.strip():
            line = " " * shift + line
        elif shift < 0 and line[:-shift].strip() == "":
            line = line[-shift:]
        out.append(line if line.endswith("\n") else line + "\n")
    return out


def define_in(path: str, code: str) -> None:
    """Put the functions and classes ``code`` defines into the file ``path`` in place of
    the ones of the same names there (a class's methods one by one): what a model means
    when it shows the fixed function under the file's name. Names the file does not
    define are reported, not added."""
    path, code = str(path), str(code)
    text = _read(path, "define_in")
    if text is None:
        return
    try:
        new_tree = ast.parse(code)
        old_tree = ast.parse(text, path)
    except SyntaxError as exc:
        print(
            f"define_in: cannot parse {exc.filename or 'the code'}: {exc.msg} (line "
            f"{exc.lineno}): nothing was changed"
        )
        return
    new_lines, lines = code.splitlines(keepends=True), text.splitlines(keepends=True)
    edits: list[tuple[int, int, list[str], str]] = []
    missing = []
    old_defs = _defs(old_tree.body)
    for name, node in _defs(new_tree.body).items():
        target = old_defs.get(name)
        if target is None:
            missing.append(name)
        elif isinstance(node, ast.ClassDef) and isinstance(target, ast.ClassDef):
            methods = _defs(target.body)
            for method_name, method in _defs(node.body).items():
                old_method = methods.get(method_name)
                if old_method is None:
                    missing.append(f"{name}.{method_name}")
                    continue
                first, end = _target(old_method, method)
                segment = _segment(new_lines, method, old_method.col_offset)
                edits.append((first, end, segment, f"{name}.{method_name}"))
        else:
            first, end = _target(target, node)
            edits.append((first, end, _segment(new_lines, node, target.col_offset), name))
    changed = []
    for first, end, segment, name in sorted(edits, reverse=True):
        if lines[first:end] != segment:
            lines[first:end] = segment
            changed.append(name)
    if missing:
        print(
            f"define_in: {path} defines no {', '.join(missing)}: not added (use replace "
            "or write the file)"
        )
    if not changed:
        print(f"define_in: {path} already holds this code: nothing was changed")
        return
    try:
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write("".join(lines))
    except OSError as exc:
        print(f"define_in: cannot write {path}: {exc.strerror}")
        return
    print(f"wrote {', '.join(reversed(changed))} into {path}")


#: What the session's namespace gets.
HELPERS = {"view": view, "replace": replace, "run": run, "define_in": define_in}
