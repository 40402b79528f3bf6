from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from jarvisd._config import Config, ToolsConfig
from jarvisd._errors import UsageError
from jarvisd._events import EventBus, EventType
from jarvisd._messages import ToolCall
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.memory import MemoryStore
from jarvisd.tools import (
    ArgumentError,
    CalculatorError,
    CalculatorTool,
    FileReadTool,
    LoopGuard,
    RetrievalTool,
    ThinkTool,
    ToolDispatcher,
    ToolRegistry,
    build_tools,
    evaluate,
    parse_arguments,
    validate_arguments,
)
from jarvisd.tools._calculator import format_number

CALC_SCHEMA = CalculatorTool().spec.parameters


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


# -- calculator --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("2+3*4", 14),
        ("2^10 + 3^5", 1267),
        ("sqrt(16)", 4.0),
        ("7 // 2", 3),
        ("-(3)", -3),
        ("10 / 4 =", 2.5),
    ],
)
def test_calculator_computes(expr: str, value: float) -> None:
    assert evaluate(expr) == value


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("9**9**9", "exponent 387420489 is too large"),
        ("1" * 200, "number literal too large"),
        ("0x" + "f" * 200, "number literal too large"),
        ("(1).real", "attribute access"),
        ("().__class__", "attribute access"),
        ("__import__('os')", "unknown function '__import__'"),
        ("2**4000 * 2**4000", "too large"),
        ("factorial(500)**2", "^a 3768-bit number"),  # not its 1135 digits
        ("10**400.5", "result too large for a float"),
        ("factorial(10000)", "factorial takes an integer up to 500"),
        ("x[0]", "indexing"),
        ("'a' * 3", "only numbers"),
        ("1/0", "division by zero"),
        ("1e308 * 10", "not a finite number"),
        ("lambda: 1", "Lambda is not allowed"),
        ("+".join(["1"] * 300), "too long"),
    ],
)
def test_calculator_refuses_with_a_clear_message(expr: str, message: str) -> None:
    with pytest.raises(CalculatorError, match=message.replace("(", r"\(").replace(")", r"\)")):
        evaluate(expr)


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("17.5% of 86420", 15123.5),
        ("17.5 % of 86,420", 15123.5),
        ("(10 + 5)% of 200", 30),
        ("15% * 200", 30),
        ("200 * 15%", 30),
        ("12%", 0.12),
        ("10 % 3", 1),  # an operand follows: the remainder, as before
        ("10 % -3", -2),
        ("3 x 4", 12),
        ("3x4", 12),
        ("3 X 4", 12),
        ("2x3x4", 24),
        ("(1+2)x(3)", 9),
        ("3\u00d74", 12),
        ("10 \u00f7 4", 2.5),
        ("2^10", 1024),
        ("5 \u2212 3", 2),
        ("86,420", 86420),
        ("1,234,567.5", 1234567.5),
        ("1,000x3", 3000),
        ("max(1, 2)", 2),  # argument commas keep their meaning
        ("max(1,2)", 2),
        ("max(1,2345)", 2345),  # four digits: not a separator
        ("max(0,500)", 500),  # a number does not start with 0
        ("min(1,000, 2,000)", 1000),  # a comma with a space always separates
        ("0x1f", 31),  # a hexadecimal literal, not 0 times 1f
        ("exp(0) x 2", 2),  # the x of a name is never a product
        ("log2(8)x3", 9),
    ],
)
def test_calculator_accepts_what_models_write(expr: str, value: float) -> None:
    assert format_number(evaluate(expr)) == format_number(value)


def test_calculator_shows_a_percentage_exactly() -> None:
    tool = CalculatorTool()
    assert tool.execute(expression="17.5% of 86420") == "15123.5"
    assert tool.execute(expression="1,234,567.5 x 2") == "2469135"


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("17.5% of", "write 17.5% of 86420 as 0.175 * 86420"),
        ("half of 10", "write 17.5% of 86420 as 0.175 * 86420"),
        ("pow(2, 10)", "use ** for powers"),
        ("3 squared", "use ** for powers"),
        ("2 to the power 10", "use ** for powers: write 2 to the power 10 as 2**10"),
        ("2 plus 3", "use only numbers, + - * / // % ** ( ) and the functions abs,"),
        ("x + 1", "unknown name 'x': variables are not allowed: use only numbers"),
        ("hypot(3, 4)", "unknown function 'hypot': the known functions are abs,"),
        ("(1, 2)", "write one expression"),
        ("1,23", "thousands separator only before exactly three digits"),
        ("max(1,000)", "max takes two or more numbers separated by ', '"),
        ("{1: 2}", "Dict is not allowed in an arithmetic expression: use only numbers"),
        ("1" + ",111" * 40, "number literal too large"),  # separators joined into digits
    ],
)
def test_calculator_errors_say_how_to_rewrite(expr: str, message: str) -> None:
    with pytest.raises(CalculatorError) as refused:
        evaluate(expr)
    assert message in str(refused.value)


def test_calculator_refusal_reaches_the_model_as_a_failed_result() -> None:
    result = run(
        ToolDispatcher([CalculatorTool()]).execute(
            ToolCall("calculator", '{"expression": "9**9**9"}')
        )
    )
    assert not result.success
    assert "exponent" in result.content and "too large" in result.content


# -- arguments: parse, repair, validate ----------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        '{"expression": "1+1"}',
        "{'expression': '1+1'}",
        '{"expression": "1+1",}',
        '```json\n{"expression": "1+1"}\n```',
        '"{\\"expression\\": \\"1+1\\"}"',
        '{"arguments": {"expression": "1+1"}}',
        "1+1",
    ],
)
def test_arguments_are_repaired(raw: str) -> None:
    assert validate_arguments(parse_arguments(raw, CALC_SCHEMA), CALC_SCHEMA) == {
        "expression": "1+1"
    }


def test_argument_types_are_coerced_or_refused() -> None:
    schema = {
        "type": "object",
        "properties": {"k": {"type": "integer"}, "q": {"type": "string"}},
        "required": ["q"],
    }
    assert validate_arguments({"q": 5, "k": "3"}, schema) == {"q": "5", "k": 3}
    with pytest.raises(ArgumentError, match="missing required parameter"):
        validate_arguments({"k": 1}, schema)
    with pytest.raises(ArgumentError, match="must be an integer"):
        validate_arguments({"q": "x", "k": "many"}, schema)
    with pytest.raises(ArgumentError, match="not a JSON object"):
        parse_arguments("not json at all", {**schema, "required": ["q", "k"]})


def test_schema_keywords_copied_into_the_arguments_are_dropped() -> None:
    # Qwen2.5-Coder-0.5B on BFCL: {"total_cards": 52, ..., "required": ["total_cards"]}.
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a"],
    }
    copied = {"a": 1, "b": 2, "required": ["a"], "properties": {}}
    assert validate_arguments(copied, schema) == {"a": 1, "b": 2}
    # A tool that declares such a name gets it; one with no declared parameters keeps
    # whatever it is sent.
    own = {"type": "object", "properties": {"required": {"type": "boolean"}}}
    assert validate_arguments({"required": True}, own) == {"required": True}
    assert validate_arguments({"required": 1}, {"type": "object"}) == {"required": 1}


# -- executor --------------------------------------------------------------------------


def test_executor_reports_unknown_tools_and_bad_arguments() -> None:
    ex = ToolDispatcher([CalculatorTool()])
    unknown = run(ex.execute(ToolCall("weather", "{}")))
    assert (
        not unknown.success
        and "unknown tool 'weather'" in unknown.content
        and "calculator" in unknown.content
    )
    bad = run(ex.execute(ToolCall("calculator", '{"expr": 1}')))
    assert not bad.success and "missing required parameter" in bad.content
    ok = run(ex.execute(ToolCall("CALCULATOR", '{"expression": "6*7"}')))
    assert ok.success and ok.content == "42" and ok.tool_name == "calculator"


def test_executor_publishes_events_and_latency() -> None:
    bus = EventBus()
    seen: list[EventType] = []
    bus.subscribe(lambda e: seen.append(e.type))
    result = run(
        ToolDispatcher([ThinkTool()]).execute(
            ToolCall("think", '{"thought": "hm"}'), RunContext(bus=bus)
        )
    )
    assert result.content == "hm" and result.latency_s > 0
    assert seen == [EventType.TOOL_CALL_START, EventType.TOOL_CALL_END]


def test_loop_guard_blocks_identical_calls_after_the_limit() -> None:
    ex = ToolDispatcher([CalculatorTool()])
    guard = LoopGuard(max_repeats=2)
    results = [
        run(ex.execute(ToolCall("calculator", '{"expression": "1+1"}'), None, guard))
        for _ in range(3)
    ]
    assert [r.success for r in results] == [True, True, False]
    assert "Blocked" in results[2].content and "'2'" in results[2].content
    assert results[2].metadata["blocked"] is True
    # Same arguments written differently count as the same call.
    again = run(ex.execute(ToolCall("calculator", "{'expression': '1+1'}"), None, guard))
    assert not again.success
    assert LoopGuard.from_dict(guard.to_dict()).counts == guard.counts


def test_executor_timeout_and_exceptions_become_results() -> None:
    from jarvisd._messages import ToolSpec
    from jarvisd.tools import BaseTool

    class Slow(BaseTool):
        spec = ToolSpec("slow", "sleeps")  # type: ignore[assignment]

        async def execute(self, **params: object) -> str:
            await asyncio.sleep(5)
            return "done"

    class Broken(BaseTool):
        spec = ToolSpec("broken", "raises")  # type: ignore[assignment]

        def execute(self, **params: object) -> str:
            raise RuntimeError("kaput")

    ex = ToolDispatcher([Slow(), Broken()], timeout=0.1)
    slow, broken = run(ex.execute_all([ToolCall("slow"), ToolCall("broken")]))
    assert not slow.success and "timed out" in slow.content
    assert not broken.success and "kaput" in broken.content


def test_independent_calls_of_one_turn_run_concurrently() -> None:
    from jarvisd._messages import ToolSpec
    from jarvisd.tools import BaseTool

    class Nap(BaseTool):
        spec = ToolSpec(
            "nap", "sleeps", {"type": "object", "properties": {"n": {"type": "integer"}}}
        )  # type: ignore[assignment]

        active = 0
        peak = 0

        async def execute(self, **params: object) -> str:
            Nap.active += 1
            Nap.peak = max(Nap.peak, Nap.active)
            await asyncio.sleep(0.05)
            Nap.active -= 1
            return str(params.get("n"))

    async def go() -> list[str]:
        results = await ToolDispatcher([Nap()]).execute_all(
            [ToolCall("nap", f'{{"n": {i}}}') for i in range(4)]
        )
        return [r.content for r in results]

    assert run(go()) == ["0", "1", "2", "3"]
    assert Nap.peak == 4  # all four were running at once


# -- file_read -------------------------------------------------------------------------


def test_file_read_allows_roots_and_refuses_outside_and_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("hello")
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    (root / "link.txt").symlink_to(secret)
    (root / "dirlink").symlink_to(tmp_path)
    tool = FileReadTool([root], max_bytes=3)
    ex = ToolDispatcher([tool])

    def read(path: str) -> tuple[bool, str]:
        r = run(ex.execute(ToolCall("file_read", f'{{"path": "{path}"}}')))
        return r.success, r.content

    ok, text = read(str(root / "a.txt"))
    assert ok and text.startswith("hel") and "truncated" in text
    for bad in (
        str(secret),
        str(root / "link.txt"),
        str(root / "dirlink" / "secret.txt"),
        str(root / ".." / "secret.txt"),
    ):
        ok, text = read(bad)
        assert not ok and "outside the allowed roots" in text, bad
    ok, text = read("a.txt")  # relative to the first root
    assert ok
    ok, text = read(str(root / "missing.txt"))
    assert not ok and "no such file" in text
    assert "no allowed roots" in read_with(FileReadTool([]), str(root / "a.txt"))


def test_file_read_refuses_fifos_and_directories_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    (tmp_path / "sub").mkdir()
    tool = FileReadTool([tmp_path])
    tool.timeout = 5
    for name in ("pipe", "sub"):
        result = run(ToolDispatcher([tool]).execute(ToolCall("file_read", f'{{"path": "{name}"}}')))
        assert not result.success and "not a regular file" in result.content, result.content


def read_with(tool: FileReadTool, path: str) -> str:
    return run(
        ToolDispatcher([tool]).execute(ToolCall("file_read", f'{{"path": "{path}"}}'))
    ).content


# -- memory, retrieval, llm, registry -----------------------------------------------------


def test_memory_store_and_retrieval_tool(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "m.db")
    store.add("The launch code is 4417.", source="note")
    store.add("Bananas are yellow.")
    hits = store.search('what is the "launch" code? AND OR (')
    assert hits and "4417" in hits[0].text
    assert store.search("...") == []
    out = run(
        ToolDispatcher([RetrievalTool(store)]).execute(
            ToolCall("retrieval", '{"query": "bananas"}')
        )
    )
    assert out.success and "yellow" in out.content
    with pytest.raises(UsageError):
        store.add("   ")


def test_llm_tool_uses_the_runs_budget() -> None:
    engine = ScriptedEngine([reply("Paris")])
    tools = build_tools(["llm"], Config(), engine)
    ctx = RunContext()
    result = run(
        ToolDispatcher(tools).execute(ToolCall("llm", '{"prompt": "Capital of France?"}'), ctx)
    )
    assert result.success and result.content == "Paris"
    assert ctx.budget.calls == 1


def test_registry_builds_configured_tools(tmp_path: Path) -> None:
    cfg = Config(tools=ToolsConfig(file_read_roots=(str(tmp_path),), file_read_max_bytes=10))
    tools = build_tools(["calculator", "file_read", "calculator", "think"], cfg)
    assert [t.spec.name for t in tools] == ["calculator", "file_read", "think"]
    assert isinstance(tools[1], FileReadTool) and tools[1].roots == [tmp_path.resolve()]
    assert set(ToolRegistry.keys()) >= {"calculator", "think", "retrieval", "llm", "file_read"}
    with pytest.raises(UsageError, match="unknown tool 'nope'"):
        build_tools(["nope"], cfg)
    spec = tools[0].to_openai_function()
    assert (
        spec["function"]["name"] == "calculator"
        and "expression" in spec["function"]["parameters"]["properties"]
    )
    assert os.environ.get("JARVIS_DATA_DIR")  # the isolated dirs fixture is active


def test_a_sync_tool_runs_in_a_thread_under_the_timeout_unless_declared_cheap() -> None:
    import threading
    import time

    from jarvisd._messages import ToolSpec
    from jarvisd.tools import BaseTool

    class Sleepy(BaseTool):  # a third-party sync tool that did not say it blocks
        spec = ToolSpec("sleepy", "blocks")  # type: ignore[assignment]

        def execute(self, **params: object) -> str:
            time.sleep(1.0)
            return "late"

    class Where(BaseTool):
        spec = ToolSpec("where", "names its thread")  # type: ignore[assignment]

        def execute(self, **params: object) -> str:
            return threading.current_thread().name

    main = threading.current_thread().name
    slow = run(ToolDispatcher([Sleepy()], timeout=0.2).execute(ToolCall("sleepy")))
    assert not slow.success and "timed out after 0.2 s" in slow.content
    assert run(ToolDispatcher([Where()]).execute(ToolCall("where"))).content != main
    assert CalculatorTool.blocking is False and ThinkTool.blocking is False  # inline: cheap
