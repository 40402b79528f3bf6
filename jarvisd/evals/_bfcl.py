"""The Berkeley Function Calling Leaderboard's AST categories, through jarvis's own
tool-call path, scored by bfcl-eval's own checker.

Each case offers the model BFCL's functions as tools and asks its question. The calls
are read as any jarvis run reads them: the orchestrator's dialect (structured calls,
or calls recovered from text), then the executor's argument repair and schema check.
The functions are never run: each tool records the arguments it was called with,
and the run stops after the model's first turn (``max_turns=1``). The recorded calls
are then scored by ``bfcl_eval``'s ``ast_checker``; in ``irrelevance`` no function
fits, and a case is right when the model calls none.

bfcl-eval ships the data sets and the checker, and depends on every API client SDK
and on sentence-transformers besides: install it without its dependencies
(``pip install --no-deps bfcl-eval==2026.3.23``); the checker needs none of them.
Its checker imports the package's model registry only to read, per model, whether
function names had their dots replaced by underscores (for APIs that refuse dots);
jarvis offers BFCL's names as they are, so a small stand-in registry that says so is
installed in its place when the real one is not loaded.
"""

from __future__ import annotations

import json
import random
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from .._errors import UsageError
from .._messages import Message, ToolResult, ToolSpec
from ..engines import Engine
from ..tools import BaseTool

__all__ = [
    "CATEGORIES",
    "BfclCase",
    "CategoryScore",
    "jarvis_calls",
    "load_cases",
    "run_bfcl",
    "score_case",
    "tool_specs",
]

#: The AST categories, in the leaderboard's order.
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
BFCL_VERSION = "2026.3.23"
INSTALL_HINT = (
    f"BFCL needs bfcl-eval: run `pip install --no-deps bfcl-eval=={BFCL_VERSION}` "
    "(its checker needs none of its many dependencies)"
)
_PREFIX = "BFCL_v4_"

#: BFCL's parameter types, as JSON schema names them.
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "integer": "integer"}


@dataclass(frozen=True, slots=True)
class BfclCase:
    id: str
    category: str
    messages: tuple[Message, ...]
    functions: tuple[Mapping[str, Any], ...]
    #: The possible answers (None in irrelevance, where no call is right).
    answer: Sequence[object] | None


@dataclass(slots=True)
class CategoryScore:
    category: str
    total: int = 0
    correct: int = 0
    errors: list[str] = field(default_factory=list)  # ids of cases that failed to run

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "category": self.category,
            "total": self.total,
            "correct": self.correct,
            "accuracy": round(self.accuracy, 4),
            "errors": list(self.errors),
        }


def _data(name: str) -> Traversable:
    try:
        return resources.files("bfcl_eval") / "data" / name
    except ModuleNotFoundError:
        raise UsageError(INSTALL_HINT) from None


def _read_lines(path: Traversable) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_cases(category: str, limit: int | None = None, seed: int = 0) -> list[BfclCase]:
    """The cases of ``category``; with ``limit``, that many drawn with ``seed`` (the
    same draw on every machine), in the data set's order."""
    if category not in CATEGORIES:
        raise UsageError(f"unknown BFCL category {category!r}; one of: {', '.join(CATEGORIES)}")
    rows = _read_lines(_data(f"{_PREFIX}{category}.json"))
    answers: dict[str, list[object]] = {}
    if category != "irrelevance":
        path = _data("possible_answer") / f"{_PREFIX}{category}.json"
        answers = {row["id"]: row["ground_truth"] for row in _read_lines(path)}
    if limit is not None and limit < len(rows):
        picked = sorted(random.Random(seed).sample(range(len(rows)), limit))
        rows = [rows[i] for i in picked]
    cases = []
    for row in rows:
        turn = row["question"][0]  # the AST categories are single-turn
        messages = tuple(Message.from_dict(m) for m in turn)
        cases.append(
            BfclCase(row["id"], category, messages, tuple(row["function"]), answers.get(row["id"]))
        )
    return cases


def _schema(value: object) -> object:
    """BFCL's parameter schema as JSON schema: its type names mapped, "any" dropped."""
    if isinstance(value, list):
        return [_schema(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, object] = {}
    for key, item in value.items():
        if key == "type" and isinstance(item, str):
            if item == "any":
                continue
            out[key] = _TYPES.get(item, item)
        elif key == "properties" and isinstance(item, dict):
            out[key] = {name: _schema(prop) for name, prop in item.items()}
        else:
            out[key] = _schema(item)
    return out


def tool_specs(functions: Sequence[Mapping[str, Any]]) -> tuple[ToolSpec, ...]:
    specs = []
    for f in functions:
        parameters = _schema(f.get("parameters") or {})
        specs.append(
            ToolSpec(
                str(f["name"]),
                str(f.get("description", "")),
                parameters if isinstance(parameters, dict) else {},
            )
        )
    return tuple(specs)


class _Recorder(BaseTool):
    """A BFCL function offered as a tool: records the arguments it is called with."""

    blocking = False  # records and returns: runs inline

    def __init__(self, spec: ToolSpec, sink: list[dict[str, dict[str, object]]]) -> None:
        self._spec = spec
        self._sink = sink

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def execute(self, **params: Any) -> ToolResult:
        self._sink.append({self._spec.name: params})
        return ToolResult(self._spec.name, "ok")


async def jarvis_calls(
    engine: Engine,
    model: str,
    case: BfclCase,
    *,
    agent: str = "orchestrator",
    max_tokens: int = 512,
) -> list[dict[str, dict[str, object]]]:
    """The calls jarvis makes for ``case``, as ``[{name: {argument: value}}]``: the
    model's first turn, read and checked as in any run (calls whose arguments fail
    the schema are not made)."""
    from ..agents import AgentRegistry

    made: list[dict[str, dict[str, object]]] = []
    system = "\n\n".join(m.content for m in case.messages if m.role.value == "system")
    question = "\n\n".join(m.content for m in case.messages if m.role.value == "user")
    runner = AgentRegistry.create(
        agent,
        engine,
        model,
        tools=[_Recorder(spec, made) for spec in tool_specs(case.functions)],
        temperature=0,
        max_tokens=max_tokens,
        max_turns=1,
        system_prompt=system or None,
    )
    await runner.arun(question)
    return made


def _checker() -> Callable[..., dict[str, Any]]:
    try:
        import bfcl_eval  # type: ignore[import-untyped]  # noqa: F401
    except ModuleNotFoundError:
        raise UsageError(INSTALL_HINT) from None
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        stand_in = types.ModuleType(name)
        stand_in.MODEL_CONFIG_MAPPING = _NamesAsOffered()  # type: ignore[attr-defined]
        sys.modules[name] = stand_in
    from bfcl_eval.eval_checker.ast_eval.ast_checker import (  # type: ignore[import-untyped]
        ast_checker,
    )

    return ast_checker  # type: ignore[no-any-return]


class _NamesAsOffered(dict[str, object]):
    """Every model: function names offered as BFCL wrote them (dots kept)."""

    def __missing__(self, key: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(underscore_to_dot=False)


def score_case(
    case: BfclCase, calls: Sequence[Mapping[str, object]], model: str = "jarvis"
) -> bool:
    """Whether ``calls`` answer ``case``, by bfcl-eval's checker."""
    if case.category == "irrelevance":
        return not calls
    if not calls:
        return False
    from bfcl_eval.constants.enums import Language  # type: ignore[import-untyped]

    result = _checker()(
        list(case.functions),
        list(calls),
        list(case.answer or ()),
        Language.PYTHON,
        case.category,
        model.replace("/", "_"),
    )
    return bool(result.get("valid"))


async def run_bfcl(
    engine: Engine,
    model: str = "",
    *,
    categories: Sequence[str] = CATEGORIES,
    limit: int | None = None,
    seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
    agent: str = "orchestrator",
) -> list[CategoryScore]:
    """Accuracy per category of ``engine`` and ``model`` on BFCL's AST categories."""
    _checker()  # fail at once, before any model work, when bfcl-eval is missing
    scores = []
    for category in categories:
        cases = load_cases(category, limit, seed)
        score = CategoryScore(category)
        for i, case in enumerate(cases):
            if progress is not None:
                progress(category, i, len(cases))
            calls = await jarvis_calls(engine, model, case, agent=agent)
            score.total += 1
            score.correct += score_case(case, calls)
        if progress is not None:
            progress(category, len(cases), len(cases))
        scores.append(score)
    return scores
