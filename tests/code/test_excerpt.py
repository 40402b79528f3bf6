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


#: A whole suite's pytest output (semver's bump bug, abridged): each failure prints the
#: test's source, a parametrized test's table of cases too, before its ``E`` lines.
CASES = "".join(f'        ("{i}.2.3", "minor", "{i}.3.0"),\n' for i in range(120))
SUITE_OUTPUT = (
    "..........F....F.....\n"
    "=================================== FAILURES ===================================\n"
    "____________________________ test_should_bump_minor ____________________________\n\n"
    "    def test_should_bump_minor():\n"
    '>       assert bump_minor("3.4.5") == "3.5.0"\n'
    "E       AssertionError: assert '3.5.5' == '3.5.0'\n\n"
    "tests/test_bump.py:20: AssertionError\n"
    "____________________________ test_next_version[case] ____________________________\n\n"
    "    @pytest.mark.parametrize(\n        'version,part,expected',\n        [\n"
    + CASES
    + "        ],\n    )\n    def test_next_version(version, part, expected):\n"
    "        ver = Version.parse(version)\n"
    ">       assert str(ver.next_version(part)) == expected\n"
    "E       AssertionError: assert '1.4.1' == '1.4.0'\n\n"
    "tests/test_parsing.py:218: AssertionError\n"
    "=========================== short test summary info ============================\n"
    "FAILED tests/test_bump.py::test_should_bump_minor - AssertionError: assert '3...\n"
    "FAILED tests/test_parsing.py::test_next_version[case] - AssertionError: asse...\n"
    "2 failed, 509 passed in 2.10s\n"
)


def _prompt(tmp_path: Path, output: str, task: str, helpers: bool = False) -> str:
    from types import SimpleNamespace

    from jarvisd.code._prompt import task_prompt
    from jarvisd.code._testrun import TestRun

    ws = SimpleNamespace(path=str(tmp_path), test="pytest -q")
    failed = TestRun("pytest -q", 1, output, 0.1, verdict="failed")
    return task_prompt(ws, task, failed, helpers=helpers)  # type: ignore[arg-type]


def test_a_long_suite_output_is_shown_as_each_failures_line_and_errors(tmp_path: Path) -> None:
    """semver's first message was 16 KB (the 1.5B model took 5 minutes a reply): the
    failures' source and a parametrized table filled the tail, the assertions pushed
    out. Each failure's failing line, errors and place are shown, and the summary."""
    assert len(SUITE_OUTPUT.encode()) > 4000
    prompt = _prompt(tmp_path, SUITE_OUTPUT, "Fix bump_minor.")
    for kept in (
        '>       assert bump_minor("3.4.5") == "3.5.0"',
        "E       AssertionError: assert '3.5.5' == '3.5.0'",
        "tests/test_bump.py:20: AssertionError",
        ">       assert str(ver.next_version(part)) == expected",
        "E       AssertionError: assert '1.4.1' == '1.4.0'",
        "FAILED tests/test_parsing.py::test_next_version[case]",
        "2 failed, 509 passed in 2.10s",
    ):
        assert kept in prompt, kept
    assert '"7.2.3"' not in prompt and "def test_should_bump_minor" not in prompt
    assert len(prompt.encode()) < 2500


def test_a_long_files_excerpt_keeps_what_the_failure_calls_within_the_bound(
    tmp_path: Path,
) -> None:
    """A word of the task names many definitions ("patch", "size"): with the room of a
    first message bounded, the definition the failure calls is kept, not crowded out
    by a long one the task only mentions."""
    long_one = "def weight(self):\n" + "".join(f"    x{i} = {i}\n" for i in range(400))
    module = MODULE + long_one + "\ndef bump_minor(v):\n    return v + 1\n"
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(module)
    output = "E   assert bump_minor(1) == 3\nFAILED test_mod.py::test_bump"
    prompt = _prompt(tmp_path, output, "The weight and the size are fine: fix the bump.")
    assert "def bump_minor(v):\n    return v + 1" in prompt
    assert "x399 = 399" not in prompt and "more left out]" in prompt
    assert len(prompt.encode()) < 6000
