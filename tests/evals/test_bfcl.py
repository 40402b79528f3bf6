"""BFCL through jarvis's tool-call path, on a scripted engine: the calls a model writes
are read, repaired and checked as in any run, then scored by bfcl-eval's checker."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest
from click.testing import CliRunner

from jarvisd._errors import UsageError
from jarvisd._messages import Generation, Message, ToolSpec
from jarvisd.cli import cli, main
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.evals import BfclCase, jarvis_calls, load_cases, run_bfcl, score_case, tool_specs
from tests.conftest import require


def _bfcl() -> None:
    try:
        import bfcl_eval  # noqa: F401
    except ModuleNotFoundError:
        require(False, "bfcl-eval is not installed (packaging/dev/setup.sh installs it)")


def right_call(case: BfclCase) -> list[dict[str, dict[str, Any]]]:
    """The first possible answer of ``case``, as calls."""
    return [
        {name: {k: v[0] for k, v in args.items() if v and v[0] != ""}}
        for answer in case.answer or ()
        for name, args in answer.items()
    ]


def answering(messages: Any, tools: Any) -> Generation:
    """A model that writes the right calls as bare JSON in its text (as small models
    do), the arguments' numbers quoted as strings (repaired by the schema check)."""
    question = next(m.content for m in messages if m.role.value == "user")
    case = CASES[question]
    calls = [
        {"name": name, "arguments": {k: str(v) if isinstance(v, int | float) else v
                                     for k, v in args.items()}}
        for call in right_call(case) for name, args in call.items()
    ]  # fmt: skip
    return reply("\n".join(json.dumps(c) for c in calls))


CASES: dict[str, BfclCase] = {}


@pytest.fixture(autouse=True)
def bfcl_installed() -> None:
    _bfcl()


def test_cases_are_drawn_the_same_way_every_time() -> None:
    first = [c.id for c in load_cases("simple_python", 5, seed=17)]
    assert first == [c.id for c in load_cases("simple_python", 5, seed=17)]
    assert len(load_cases("irrelevance")) == 240
    with pytest.raises(UsageError, match="unknown BFCL category"):
        load_cases("live_simple")


def test_schemas_become_json_schema() -> None:
    spec = tool_specs(
        [{"name": "f", "description": "d", "parameters": {"type": "dict", "properties": {
            "x": {"type": "float"}, "xs": {"type": "tuple", "items": {"type": "any"}}}}}]
    )[0]  # fmt: skip
    assert spec.parameters == {
        "type": "object",
        "properties": {"x": {"type": "number"}, "xs": {"type": "array", "items": {}}},
    }


@pytest.mark.parametrize("category", ["simple_python", "multiple", "parallel", "parallel_multiple"])
def test_right_calls_written_as_text_score_and_wrong_ones_do_not(category: str) -> None:
    cases = load_cases(category, 3, seed=17)
    CASES.update({c.messages[-1].content: c for c in cases})
    engine = ScriptedEngine(fallback=answering)

    async def go() -> list[Any]:
        return [await jarvis_calls(engine, "", c) for c in cases]

    for case, calls in zip(cases, asyncio.run(go()), strict=True):
        assert score_case(case, calls), (case.id, calls)
        assert not score_case(case, [{"no_such_function": {}}])
        assert not score_case(case, [])


def test_irrelevance_is_right_without_a_call() -> None:
    case = load_cases("irrelevance", 1, seed=17)[0]
    assert score_case(case, [])
    assert not score_case(case, [{case.functions[0]["name"]: {}}])


def test_run_bfcl_reports_accuracy_per_category() -> None:
    engine = ScriptedEngine(fallback=reply("I cannot help with that."))
    seen: list[tuple[str, int, int]] = []
    scores = asyncio.run(
        run_bfcl(engine, categories=["simple_python", "irrelevance"], limit=2,
                 progress=lambda *a: seen.append(a))
    )  # fmt: skip
    assert [(s.category, s.total, s.correct) for s in scores] == [
        ("simple_python", 2, 0),
        ("irrelevance", 2, 2),
    ]
    assert seen[-1] == ("irrelevance", 2, 2)


def test_cli_prints_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = ScriptedEngine(fallback=reply("No function fits."))
    monkeypatch.setattr("jarvisd.engines.select_engine", lambda *a, **k: engine)
    result = CliRunner().invoke(cli, ["eval", "bfcl", "-c", "irrelevance", "-n", "2"])
    assert result.exit_code == 0, result.output
    assert "irrelevance" in result.output and "100.0%" in result.output
    result = CliRunner().invoke(cli, ["eval", "bfcl", "-c", "irrelevance", "-n", "1", "--json"])
    assert json.loads(result.output)["scores"][0]["accuracy"] == 1.0


def test_without_bfcl_eval_one_line_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "bfcl_eval", None)  # import fails as if not installed
    engine = ScriptedEngine(fallback=reply("x"))
    monkeypatch.setattr("jarvisd.engines.select_engine", lambda *a, **k: engine)
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "bfcl", "-n", "1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install --no-deps bfcl-eval==2026.3.23" in err
    assert engine.calls == []  # failed before any model work


def test_no_tool_call_message_is_needed() -> None:
    # ToolSpec and Message are the types the cases travel in.
    case = load_cases("simple_python", 1, seed=17)[0]
    assert isinstance(case.messages[0], Message)
    assert isinstance(tool_specs(case.functions)[0], ToolSpec)
