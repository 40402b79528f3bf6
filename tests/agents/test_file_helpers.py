"""CodeAct's file helpers (``runners.file_helpers``): numbered views a window at a time,
a replace that refuses 0 or several matches and writes nothing then, a command's exit
status and bounded output; and the dialect's one re-ask of a claim without action."""

from __future__ import annotations

from pathlib import Path

import pytest

from jarvisd._messages import Generation
from jarvisd.agents._codeact import FILE_HELPERS_PROMPT, SessionDialect
from runners.file_helpers import HELPERS, RUN_OUTPUT_BYTES, VIEW_LINES, replace, run, view

SOURCE = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"


def test_the_prompt_names_every_helper() -> None:
    for name in HELPERS:
        assert f"{name}(" in FILE_HELPERS_PROMPT


def test_view_numbers_lines_a_window_at_a_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.py"
    path.write_text("".join(f"x{i} = {i}\n" for i in range(1, 501)))
    view(str(path))
    out = capsys.readouterr().out
    assert f"(lines 1-{VIEW_LINES} of 500)" in out and "    1  x1 = 1" in out
    assert (
        f"x{VIEW_LINES + 1} =" not in out
        and f"[more: view({str(path)!r}, {VIEW_LINES + 1})]" in out
    )
    view(str(path), 499, 600)
    assert capsys.readouterr().out.splitlines()[1:] == ["  499  x499 = 499", "  500  x500 = 500"]
    view(str(tmp_path / "missing.py"))
    assert "view: no such file" in capsys.readouterr().out


def test_replace_refuses_zero_or_several_matches_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "calc.py"
    path.write_text(SOURCE)
    replace(str(path), "return a - b", "return a + b")
    out = capsys.readouterr().out
    assert "occurs 2 times" in out and "at lines 2, 6" in out and "nothing was changed" in out
    assert path.read_text() == SOURCE
    replace(str(path), "return a * b", "return a + b")
    assert "0 matches" in capsys.readouterr().out and path.read_text() == SOURCE
    replace(str(path), "", "x")
    assert "old is empty" in capsys.readouterr().out and path.read_text() == SOURCE
    replace(str(path), "def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b")
    out = capsys.readouterr().out
    assert "replaced 1 snippet" in out and "    2      return a + b" in out
    assert path.read_text() == SOURCE.replace("a - b", "a + b", 1)


def test_run_prints_the_exit_status_and_a_bounded_tail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run("echo first; yes y | head -c 3000000; echo; echo last; exit 3")
    out = capsys.readouterr().out
    assert out.rstrip().endswith("last\n[exit 3]") and "bytes of output left out" in out
    assert "first" not in out and len(out.encode()) < RUN_OUTPUT_BYTES + 200
    run("sleep 5", timeout=0.2)
    assert "did not end within 0.2 s" in capsys.readouterr().out


class _Session:
    file_helpers = True


class _Tools:
    names = ("python",)

    def resolve(self, name: str) -> str | None:
        return None


def _parse(dialect: SessionDialect, text: str) -> str:
    return dialect.parse(Generation(content=text), _Tools()).kind  # type: ignore[arg-type]


def test_a_claim_before_any_code_is_asked_once_to_act() -> None:
    claim = "I changed the function dasherize to replace underscores with dashes."
    dialect = SessionDialect(_Session(), reask_unacted=True)  # type: ignore[arg-type]
    assert _parse(dialect, claim) == "invalid"
    assert _parse(dialect, claim) == "final"  # once only: the second is the answer
    acted = SessionDialect(_Session(), reask_unacted=True)  # type: ignore[arg-type]
    assert _parse(acted, "```python\nprint(1)\n```") == "calls"
    assert _parse(acted, claim) == "final"  # code ran: jarvis code judges the diff
    plain = SessionDialect(_Session())  # type: ignore[arg-type]
    assert _parse(plain, claim) == "final"  # off unless asked (jarvis code asks)
    unclaimed = SessionDialect(_Session(), reask_unacted=True)  # type: ignore[arg-type]
    assert _parse(unclaimed, "The answer is 4.") == "final"


def test_a_block_that_only_defines_code_is_not_acting_and_says_so() -> None:
    """Small models show the fixed function as a block: it runs, defines add in the
    session, and changes no file. It is told so, and a claim after it is re-asked."""
    from jarvisd._messages import ToolResult

    shown = "Here is the fixed add:\n```python\ndef add(a, b):\n    return a + b\n```"
    dialect = SessionDialect(_Session(), reask_unacted=True)  # type: ignore[arg-type]
    step = dialect.parse(Generation(content=shown), _Tools())  # type: ignore[arg-type]
    assert step.kind == "calls"
    (message,) = dialect.result_messages(step, [ToolResult("python", "(no output)")])
    assert "only defined code in the session: no file changed" in message.content
    assert "replace(path, old, new)" in message.content
    assert _parse(dialect, "I fixed add in calc.py.") == "invalid"
    wrote = SessionDialect(_Session(), reask_unacted=True)  # type: ignore[arg-type]
    step = wrote.parse(Generation(content="```python\nopen('/ws/calc.py', 'w').write('x')\n```"),
                       _Tools())  # type: ignore[arg-type]  # fmt: skip
    (message,) = wrote.result_messages(step, [ToolResult("python", "1")])
    assert "no file changed" not in message.content
    assert _parse(wrote, "I fixed add in calc.py.") == "final"


def test_a_block_shown_under_a_files_name_is_put_into_that_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What 1.5B writes for "fix add": the fixed function under the file's name, in a
    comment or in the line before the fence. It goes into the file in place of the old
    definition (its decorators and the file's other code kept)."""
    from runners.file_helpers import define_in

    calc = tmp_path / "calc.py"
    calc.write_text("import os\n\n\n@cache\ndef add(a, b):\n    return a - b\n\n\nclass K:\n"
                    "    def f(self):\n        return 1\n\n    def g(self):\n        return 2\n")  # fmt: skip
    shown = (
        f"Here is the fix:\n\n**{calc}:**\n```python\ndef add(a, b):\n    return a + b\n```\n"
        f"and\n```python\n# {calc}\nclass K:\n  def g(self):\n      return 3\n```\n"
        "```python\ndef helper():\n    pass\n```"
    )
    dialect = SessionDialect(_Session(), reask_unacted=True)  # type: ignore[arg-type]
    step = dialect.parse(Generation(content=shown), _Tools())  # type: ignore[arg-type]
    code = step.calls[0].arguments_dict()["code"]
    assert code.count("define_in(") == 2 and code.endswith("def helper():\n    pass")
    assert _parse(dialect, "I fixed add.") == "final"  # it acted: it wrote a file
    exec(code, {"define_in": define_in})  # as the session runs it
    assert "a - b" not in calc.read_text()
    assert "@cache\ndef add(a, b):\n    return a + b\n" in calc.read_text()
    assert "    def f(self):\n        return 1\n\n    def g(self):\n        return 3\n" in (
        calc.read_text()
    )
    out = capsys.readouterr().out
    assert f"wrote add into {calc}" in out and f"wrote K.g into {calc}" in out
    define_in(str(calc), "def nope():\n    pass\n")
    assert "defines no nope: not added" in capsys.readouterr().out
    plain = SessionDialect(_Session())  # type: ignore[arg-type]
    step = plain.parse(Generation(content=shown), _Tools())  # type: ignore[arg-type]
    assert "define_in(" not in step.calls[0].arguments_dict()["code"]  # jarvis code only


def test_a_relative_file_name_resolves_in_the_work_dir(tmp_path: Path) -> None:
    class Rooted(_Session):
        cwd = str(tmp_path)

    shown = "Here is the fixed `pkg/calc.py`:\n```python\ndef add(a, b):\n    return a + b\n```"
    dialect = SessionDialect(Rooted(), reask_unacted=True)  # type: ignore[arg-type]
    code = dialect.parse(Generation(content=shown), _Tools()).calls[0].arguments_dict()["code"]  # type: ignore[arg-type]
    assert code.startswith(f"define_in({str(tmp_path / 'pkg' / 'calc.py')!r}, ")
    rootless = SessionDialect(_Session(), reask_unacted=True)  # type: ignore[arg-type]
    code = rootless.parse(Generation(content=shown), _Tools()).calls[0].arguments_dict()["code"]  # type: ignore[arg-type]
    assert "define_in(" not in code  # no root: a relative name means nothing


@pytest.mark.parametrize("depth", [3_000, 10_000])
def test_a_block_the_parser_cannot_hold_is_run_not_a_crash(depth: int) -> None:
    """A small model's degenerate reply (thousands of unary minuses) makes CPython's
    parser raise RecursionError or MemoryError; reading the block for what it defines
    must not end the run: the block goes to the session, whose error the model sees."""
    from jarvisd._messages import ToolResult

    deep = "x = " + "-" * depth + "1"
    for shown in (f"```python\n{deep}\n```", f"```python\n# /ws/calc.py\n{deep}\n```"):
        dialect = SessionDialect(_Session(), reask_unacted=True)  # type: ignore[arg-type]
        step = dialect.parse(Generation(content=shown), _Tools())  # type: ignore[arg-type]
        assert step.kind == "calls"
        (message,) = dialect.result_messages(step, [ToolResult("python", "RecursionError")])
        assert "no file changed" not in message.content
