"""A long file named by a task or a failure is put in front of the agent as the
definitions named in it (fewer tokens for a small model to read); a short one, one
that names nothing of it, or one that does not parse, is shown whole."""

from __future__ import annotations

from pathlib import Path

from jarvisd.code._excerpt import WHOLE_FILE_BYTES, excerpt

FILLER = "".join(f"def other_{i}(x):\n    return x + {i}\n\n\n" for i in range(200))
MODULE = (
    FILLER
    + "@cached\ndef dasherize(word):\n    return word.replace('-', '_')\n\n\n"
    + "class Box:\n    def size(self):\n        return 1\n\n    def weight(self):\n"
    + "        return 2 / 0\n"
    + FILLER.replace("other_", "more_")
)


def _line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_long_file_is_cut_to_the_definition_the_task_names() -> None:
    assert len(MODULE.encode()) > WHOLE_FILE_BYTES
    shown = excerpt("pkg/mod.py", MODULE, ["Fix the bug in dasherize in pkg/mod.py."])
    first = _line(MODULE, "@cached")
    assert f"[lines {first}-{first + 2}]" in shown
    assert "@cached\ndef dasherize(word):\n    return word.replace('-', '_')" in shown
    assert "other_" not in shown and "more_" not in shown and "Box" not in shown
    assert len(shown.encode()) < 200


def test_a_line_a_traceback_cites_picks_the_method_that_holds_it() -> None:
    line = _line(MODULE, "2 / 0")
    for output in (
        f"pkg/mod.py:{line}: ZeroDivisionError",
        f'File "/ws/pkg/mod.py", line {line}, in weight',
    ):
        shown = excerpt("pkg/mod.py", MODULE, [output])
        assert "    def weight(self):\n        return 2 / 0" in shown, shown
        assert "def size" not in shown and "dasherize" not in shown


def test_short_unnamed_or_unparsable_files_are_shown_whole() -> None:
    small = "def dasherize(word):\n    return word\n"
    assert excerpt("m.py", small, ["dasherize"]) == small
    assert excerpt("pkg/mod.py", MODULE, ["fix the tests"]) == MODULE
    broken = MODULE + "def (:\n"
    assert excerpt("pkg/mod.py", broken, ["dasherize"]) == broken


def test_the_first_message_shows_the_named_function_of_a_long_file(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from jarvisd.code._prompt import task_prompt
    from jarvisd.code._testrun import TestRun

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(MODULE)
    ws = SimpleNamespace(path=str(tmp_path), test="pytest -q")
    failed = TestRun("pytest -q", 1, "FAILED test_mod.py::test_dasherize", 0.1, verdict="failed")
    prompt = task_prompt(ws, "Fix dasherize in pkg/mod.py.", failed)  # type: ignore[arg-type]
    assert f"{tmp_path}/pkg/mod.py:" in prompt
    assert "return word.replace('-', '_')" in prompt and "other_1(" not in prompt


def test_a_cited_line_outside_every_definition_is_shown_with_its_neighbours() -> None:
    module = MODULE + "VALUE = undefined_name\n" + FILLER.replace("other_", "tail_")
    line = _line(module, "VALUE = undefined_name")
    shown = excerpt("pkg/mod.py", module, [f'File "/ws/pkg/mod.py", line {line}, in <module>'])
    assert f"[lines {line - 3}-{line + 3}]" in shown and "VALUE = undefined_name" in shown
    assert "dasherize" not in shown


def test_a_file_the_parser_cannot_hold_is_shown_whole() -> None:
    # The agent writes the files a failure names: 100,000 unary minuses make CPython's
    # parser raise MemoryError, which must not end the run's next prompt.
    hostile = "def f():\n    return 1\n" + "x = " + "-" * 100_000 + "1\n"
    assert excerpt("m.py", hostile, ["f failed"]) == hostile


def test_a_class_named_with_its_method_shows_the_method_not_the_whole_class() -> None:
    """``Box.weight(`` names the class and its method (semver's ``Version.parse(...)
    .bump_minor()``: the whole 800-line class was shown)."""
    shown = excerpt("pkg/mod.py", MODULE, ["Box.weight() divides by zero."])
    assert "class Box:" in shown and "def weight(self):" in shown
    assert "def size(self):" not in shown and "other_" not in shown


def test_of_the_tests_output_only_what_it_calls_names_a_definition() -> None:
    """A whole suite's output holds hundreds of words: only its calls choose."""
    output = "E   assert dasherize(word) == other_1 + other_2\nsize weight Box"
    shown = excerpt("pkg/mod.py", MODULE, ["The tests fail.", output])
    assert "def dasherize(word):" in shown
    assert "other_1" not in shown and "class Box" not in shown
