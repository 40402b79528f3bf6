"""RLM: the REPL runs in its own process, context as a variable, llm_query/llm_batch
answered by the host through the run's engine, FINAL/FINAL_VAR, timeouts, depth."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from jarvisd._messages import Generation, Message, ToolSpec
from jarvisd._runcontext import RunContext
from jarvisd.agents import AgentContext, AgentRegistry
from jarvisd.engines import Engine, ScriptedEngine, reply
from jarvisd.executors import SubprocessExecutor

from ._helpers import KINDS, PeakInFlight, engine_for, router, via_ollama

CONTEXT = "".join(f"Line {i}: filler text about nothing in particular.\n" for i in range(400))
CONTEXT = CONTEXT.replace("Line 321:", "Line 321: the secret code is 7781.")


def code(src: str) -> Generation:
    return reply(f"```python\n{src}\n```")


def rlm(engine: Engine, **kw: Any) -> Any:
    kw.setdefault("executor", SubprocessExecutor())
    return AgentRegistry.create("rlm", engine, "scripted", temperature=0, **kw)


def arun(agent: Any, text: str, context: str = CONTEXT, run: RunContext | None = None) -> Any:
    async def go() -> Any:
        try:
            return await agent.arun(text, AgentContext(metadata={"context": context}), run=run)
        finally:
            if not isinstance(agent.engine, ScriptedEngine):
                await agent.engine.aclose()

    return asyncio.run(go())


def finder(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str:
    text = messages[-1].content
    return "7781" if "7781" in text else "none"


def test_rlm_finds_a_fact_in_a_long_context_with_llm_batch_and_final() -> None:
    root = [
        code("print(len(context))\nprint(context[:60])"),
        code(
            "chunks = [context[i:i+4000] for i in range(0, len(context), 4000)]\n"
            "answers = llm_batch(['Secret code in this text? ' + c for c in chunks])\n"
            "print(answers)"
        ),
        code("code = [a for a in answers if a != 'none'][0]\nFINAL_VAR('code')"),
    ]
    queue = list(root)

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if messages[0].role.value == "system":
            return queue.pop(0)
        return reply(finder(messages, tools))

    scripted = ScriptedEngine(fallback=answer)
    result = arun(rlm(scripted), "What is the secret code?")
    assert result.content == "7781"
    assert result.turns == 3
    assert str(len(CONTEXT)) in result.tool_results[0].content
    sub_calls = [c for c in scripted.calls if c.messages[0].role.value != "system"]
    assert len(sub_calls) == -(-len(CONTEXT) // 4000)
    # The context never went into the root model's prompt.
    assert all(len(c.messages[-1].content) < 5000 for c in scripted.calls)
    assert result.metadata["context_chars"] == len(CONTEXT)


def test_rlm_through_the_ollama_protocol() -> None:
    scripted = router([
        code("x = llm_query('Secret code in: ' + context[12000:14000])\nprint(x)"),
        code("FINAL(x)"),
    ], sub="7781")  # fmt: skip
    with via_ollama(scripted) as engine:
        result = arun(rlm(engine), "What is the secret code?")
    assert result.content == "7781"
    assert result.tool_results[0].content.strip() == "7781"


def test_llm_batch_is_concurrent() -> None:
    scripted = router(
        [code("t = llm_batch(['a', 'b', 'c', 'd', 'e'])\nprint(t)"), code("FINAL('ok')")]
    )
    scripted.latency_s = 0.2
    engine = PeakInFlight(scripted)
    result = arun(rlm(engine), "batch")
    assert result.content == "ok"
    assert result.tool_results[0].content.count("sub-answer") == 5
    assert engine.peak == 5  # the five sub-calls were in the engine at once


def test_repl_is_a_separate_persistent_process_and_output_is_truncated() -> None:
    scripted = router([
        code("import os\npid = os.getpid()\nprint(pid)"),
        code("print(pid)\nprint('x' * 500)"),
        code("FINAL(str(pid))"),
    ])  # fmt: skip
    result = arun(rlm(scripted, max_output_chars=100), "pid")
    first, second = (r.content for r in result.tool_results[:2])
    assert first.strip() != str(os.getpid())
    assert second.startswith(first.strip())  # the variable persisted
    assert "output truncated" in second
    assert result.content == first.strip()


def test_errors_in_a_cell_are_reported_and_the_loop_continues() -> None:
    scripted = router([code("1/0"), code("FINAL(context[:4])")])
    result = arun(rlm(scripted), "x")
    assert "ZeroDivisionError" in result.tool_results[0].content
    assert not result.tool_results[0].success
    assert result.content == "Line"


def test_exec_timeout_kills_and_restarts_the_repl() -> None:
    scripted = router(
        [
            code("y = 5\nwhile True: pass"),
            code("print(len(context))\nprint('y' in dir())"),
            code("FINAL('done')"),
        ]
    )
    result = arun(rlm(scripted, exec_timeout=1.0), "spin")
    assert "timed out after 1 s" in result.tool_results[0].content
    assert result.tool_results[1].content.split() == [str(len(CONTEXT)), "False"]
    assert result.content == "done"


def test_time_spent_answering_sub_calls_does_not_count_against_the_cell_timeout() -> None:
    # Three sequential sub-calls of 0.5 s each: 1.5 s of waiting in a cell whose own
    # running time is tiny. A slow local model must not get the cell killed.
    scripted = router(
        [code("a = [llm_query(str(i)) for i in range(3)]\nprint(len(a))"), code("FINAL('ok')")]
    )
    scripted.latency_s = 0.5
    result = arun(rlm(scripted, exec_timeout=1.0), "x")
    assert result.tool_results[0].content == "3", result.tool_results[0].content
    assert result.content == "ok"


def test_the_cell_clock_runs_again_after_its_sub_calls() -> None:
    # The cell's own work before and after a sub-call adds up past the timeout.
    scripted = router([
        code("import time\ntime.sleep(0.6)\nx = llm_query('q')\ntime.sleep(0.6)\nprint(x)"),
        code("FINAL('done')"),
    ])  # fmt: skip
    result = arun(rlm(scripted, exec_timeout=1.0), "x")
    assert "timed out after 1 s of running time" in result.tool_results[0].content
    assert result.content == "done"


def test_sub_call_errors_become_exceptions_in_the_cell() -> None:
    from jarvisd._errors import EngineResponseError

    calls = {"n": 0}

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if messages[0].role.value == "system":
            calls["n"] += 1
            return [code("try:\n    llm_query('q')\nexcept Exception as e:\n    print(type(e).__name__, e)"),
                    code("FINAL('x')")][calls["n"] - 1]  # fmt: skip
        raise EngineResponseError("model exploded", 500)

    result = arun(rlm(ScriptedEngine(fallback=answer)), "x")
    assert "LLMQueryError model exploded" in result.tool_results[0].content


def test_recursive_sub_calls_are_depth_limited() -> None:
    depths: list[int] = []

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if messages[0].role.value == "system":
            system = messages[0].content
            if "of 100 characters" in system:  # the nested RLM's context
                if len(messages) == 2:
                    return code(
                        "inner = llm_query('summarize', context=context)\nFINAL('nested:' + inner)"
                    )
            elif len(messages) == 2:
                return code("r = llm_query('look', context='z' * 100)\nFINAL(r)")
        depths.append(1)
        return reply("plain")

    result = arun(rlm(ScriptedEngine(fallback=answer), max_depth=2), "x")
    # depth 0 -> nested RLM at depth 1 -> its sub-call at depth 2 is a plain call.
    assert result.content == "nested:plain"
    assert depths == [1]


@pytest.mark.parametrize("kind", KINDS)
def test_no_code_and_no_final_is_reported_not_taken_as_the_answer(kind: str) -> None:
    scripted = router([reply("The code is probably 1234."), reply("I am sure it is 1234.")])
    with engine_for(kind, scripted) as engine:
        result = arun(rlm(engine), "x")
    assert "unparseable" in result.metadata["error"]
    assert result.content.startswith("Error:") and result.turns == 2
    root = [c for c in scripted.calls if c.messages[0].role.value == "system"]
    assert "could not be used" in root[1].messages[-1].content  # the one corrective prompt


@pytest.mark.parametrize("kind", KINDS)
def test_max_turns(kind: str) -> None:
    scripted = router([code(f"print({i} * 2)") for i in range(5)])
    with engine_for(kind, scripted) as engine:
        result = arun(rlm(engine, max_turns=3), "x")
    assert result.turns == 3 and result.metadata["max_turns_exceeded"] is True
    assert [r.content for r in result.tool_results] == ["0", "2", "4"]


def answer_turn_router(root: Sequence[Generation], answer: str) -> ScriptedEngine:
    """Like ``router``, and the loop's answer turn (no system prompt) gets ``answer``."""
    queue = list(root)

    def respond(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if messages[0].role.value == "system":
            return queue.pop(0) if queue else reply("script exhausted")
        if "Do not call any tool" in messages[-1].content:
            return reply(answer)
        return reply("sub-answer")

    return ScriptedEngine(fallback=respond)


@pytest.mark.parametrize("kind", KINDS)
def test_a_repeated_identical_cell_is_blocked_and_the_model_is_told(kind: str) -> None:
    scripted = answer_turn_router([code("print(6 * 7)"), code("print(6 * 7)")], "FINAL(42)")
    with engine_for(kind, scripted) as engine:
        result = arun(rlm(engine, max_repeats=1), "x")
    first, second = result.tool_results
    assert first.success and first.content == "42"
    assert not second.success and second.metadata["blocked"] is True
    assert "Blocked" in second.content and "already called 1 times" in second.content
    assert result.metadata["blocked_calls"] == 1 and result.metadata["answer_turn"] is True
    assert result.content == "42"


FENCES = {
    "python": "```python\n{src}\n```",
    "py": "Let me look.\n```py\n{src}\n```",
    "repl": "```repl\n{src}\n```",
    "bare": "```\n{src}\n```",
    "unclosed": "Here:\n```python\n{src}\n",
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("style", list(FENCES))
def test_code_written_in_any_fence_runs(kind: str, style: str) -> None:
    scripted = router([reply(FENCES[style].format(src="FINAL(context[:4])"))])
    with engine_for(kind, scripted) as engine:
        result = arun(rlm(engine), "x")
    assert result.content == "Line" and result.tool_results[0].tool_name == "repl"
    assert result.metadata["final_from_tool"] is True


def test_a_subscriber_that_raises_never_breaks_an_rlm_run(caplog: pytest.LogCaptureFixture) -> None:
    from jarvisd._events import Event, EventBus

    def broken(event: Event) -> None:
        raise RuntimeError("subscriber bug")

    bus = EventBus()
    bus.subscribe(broken)
    scripted = router([code("x = llm_query('q')\nprint(x)"), code("FINAL(x)")])
    result = arun(rlm(scripted), "x", run=RunContext(bus=bus))
    assert result.content == "sub-answer" and "subscriber bug" in caplog.text


def test_final_written_as_text_ends_the_run() -> None:
    scripted = router([reply("FINAL(7781)")])
    assert arun(rlm(scripted), "x").content == "7781"


def test_cancel_stops_the_repl() -> None:
    scripted = router([code("import time\ntime.sleep(30)")])
    run = RunContext()

    async def go() -> None:
        asyncio.get_running_loop().call_later(0.5, run.cancel.cancel, "stop")
        await rlm(scripted).arun("x", AgentContext(metadata={"context": "c"}), run=run)

    from jarvisd._runcontext import Cancelled

    started = time.perf_counter()
    with pytest.raises(Cancelled):
        asyncio.run(go())
    assert time.perf_counter() - started < 5


def test_sub_calls_use_the_sub_model_settings() -> None:
    scripted = router([code("x = llm_query('q')"), code("FINAL(x)")])
    agent = rlm(scripted, sub_model="tiny", sub_temperature=0.1, sub_max_tokens=77)
    assert arun(agent, "x").content == "sub-answer"
    sub = [c for c in scripted.calls if c.messages[0].role.value != "system"]
    assert [(c.model, c.options.temperature, c.options.max_tokens) for c in sub] == [
        ("tiny", 0.1, 77)
    ]
    root = [c for c in scripted.calls if c.messages[0].role.value == "system"]
    assert {c.model for c in root} == {"scripted"}


def test_jarvis_ask_gives_rlm_the_context_file(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from jarvisd._paths import paths
    from jarvisd.cli import cli
    from jarvisd.testing import OllamaStandIn

    notes = tmp_path / "notes.txt"
    notes.write_text(CONTEXT)
    scripted = router([
        code("print(len(context))\nx = llm_query('Secret code in: ' + context[12000:14000])"),
        code("FINAL(x)"),
    ], sub="7781")  # fmt: skip
    with OllamaStandIn(scripted) as standin:
        paths().config_file.parent.mkdir(parents=True, exist_ok=True)
        paths().config_file.write_text(
            f'[engine.ollama]\nhost = "{standin.url}"\n[sandbox]\nbackend = "none"\n'
        )
        out = CliRunner().invoke(cli, [
            "ask", "--no-daemon", "--engine", "ollama", "--model", "scripted", "--agent", "rlm",
            "--context", str(notes), "--json", "What is the secret code?",
        ])  # fmt: skip
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["answer"] == "7781"
    assert data["tool_results"][0]["content"] == str(len(CONTEXT))
    assert data["metadata"]["context_chars"] == len(CONTEXT)


def test_a_resumed_rlm_runs_no_cell_again_and_is_told_its_repl_is_new() -> None:
    # Issue 36: no replay of earlier cells (their sub-calls would be asked again). The
    # first run stops after one cell (max_turns); a new agent resumes from its checkpoint
    # in a fresh REPL without `x`, and the model is told so, with `context` set again.
    states: list[Any] = []
    first = rlm(ScriptedEngine([code("x = 41\nprint('set')")]), max_turns=1)
    arun(first, "q", run=RunContext(checkpoint=states.append))
    engine = ScriptedEngine([code("print('x' in dir())"), code("FINAL('again')")])
    result = arun(rlm(engine), "q", run=RunContext(resume=states[-1]))
    assert result.content == "again", result.tool_results
    assert result.metadata["resumed"] is True
    assert [r.content for r in result.tool_results][-2] == "False"
    told = engine.calls[0].messages[-1].content
    assert "NEW session" in told and "(context, question are set again)" in told


def test_a_flood_of_sub_calls_is_bounded() -> None:
    # The REPL runs the model's code: 1,000 prompts at once are answered a few at a
    # time, and those past the pending bound are refused, not queued.
    from jarvisd.agents._repl import MAX_CONCURRENT_SUB_CALLS, MAX_PENDING_SUB_CALLS

    in_flight, peak = [0], [0]

    class Counting(ScriptedEngine):
        async def generate(self, *args: Any, **kw: Any) -> Generation:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
            try:
                return await super().generate(*args, **kw)
            finally:
                in_flight[0] -= 1

    root = [
        code("try:\n    llm_batch(['q'] * 1000)\nexcept Exception as e:\n    print('refused:', e)"),
        code("FINAL('done')"),
    ]

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        return root.pop(0) if messages[0].role.value == "system" else reply("sub")

    engine = Counting(fallback=answer, latency_s=0.01)
    result = arun(rlm(engine), "flood")
    assert result.content == "done"
    assert f"more than {MAX_PENDING_SUB_CALLS} sub-calls" in result.tool_results[0].content
    assert peak[0] <= MAX_CONCURRENT_SUB_CALLS + 1  # the sub-calls, and no more
    assert len(engine.calls) < 500  # most of the flood was refused, not served


def test_a_resume_after_final_returns_it_without_re_running_cells() -> None:
    # rlm's FINAL comes from a cell: a resume from that checkpoint must neither re-run
    # the cells (a repeated FINAL cell is blocked as a repeat) nor ask the model again.
    states: list[Any] = []
    first = rlm(ScriptedEngine([code("x = 41\nprint('set')"), code("FINAL(x + 1)")]))
    assert arun(first, "q", run=RunContext(checkpoint=states.append)).content == "42"
    assert states[-1]["final"]["content"] == "42"
    engine = ScriptedEngine([])
    result = arun(rlm(engine), "q", run=RunContext(resume=states[-1]))
    assert result.content == "42" and engine.calls == []
    assert result.metadata["resumed"] is True and result.metadata["final_from_tool"] is True
