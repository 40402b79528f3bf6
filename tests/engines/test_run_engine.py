"""RunEngine: one wrapper per run and engine, racing the run's cancel token, and the one
place where engine calls reserve and settle the run's ledger."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from jarvisd._errors import EngineUnavailable
from jarvisd._messages import Generation, Message, SamplingOptions, ToolSpec, Usage
from jarvisd._runcontext import Budget, BudgetExceeded, Cancelled, RunContext
from jarvisd.engines import RunEngine, ScriptedEngine, reply
from jarvisd.engines._tokens import prompt_tokens
from jarvisd.testing import MeteredEngine

HELLO = [Message.user("hi")]


def test_bind_reuses_one_wrapper_per_run_and_engine_and_children_share_it() -> None:
    engine, other = ScriptedEngine(), ScriptedEngine()
    run = RunContext()
    bound = RunEngine.bind(engine, run)
    assert RunEngine.bind(engine, run) is bound
    assert RunEngine.bind(engine, run.child()) is bound
    assert RunEngine.bind(bound, run) is bound
    assert RunEngine.bind(other, run) is not bound
    assert RunEngine.bind(engine, RunContext()) is not bound


def test_a_cancel_from_another_thread_interrupts_the_engine_call() -> None:
    run = RunContext()
    engine = RunEngine.bind(ScriptedEngine([reply("late")], latency_s=30), run)

    async def go() -> None:
        threading.Timer(0.2, run.cancel.cancel, ("stop",)).start()
        await engine.generate(HELLO)

    started = time.perf_counter()
    with pytest.raises(Cancelled, match="stop"):
        asyncio.run(go())
    assert time.perf_counter() - started < 5


def test_many_calls_then_a_cancel_after_the_loop_closed_is_harmless() -> None:
    run = RunContext()
    engine = RunEngine.bind(ScriptedEngine([reply(str(i)) for i in range(50)]), run)

    async def go() -> list[str]:
        return [(await engine.generate(HELLO)).content for _ in range(50)]

    assert asyncio.run(go())[-1] == "49"
    run.cancel.cancel("after the fact")  # the loop is closed: nothing to interrupt, no error
    with pytest.raises(Cancelled):
        asyncio.run(engine.generate(HELLO))


def test_cancelling_the_task_itself_is_not_turned_into_a_run_cancel() -> None:
    run = RunContext()
    engine = RunEngine.bind(ScriptedEngine([reply("late")], latency_s=30), run)

    async def go() -> None:
        task = asyncio.ensure_future(engine.generate(HELLO))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert not run.cancel.cancelled


def test_the_budget_is_reserved_before_the_call() -> None:
    run = RunContext(budget=Budget(max_calls=1))
    scripted = ScriptedEngine([reply("a"), reply("b")])
    engine = RunEngine.bind(scripted, run)
    assert asyncio.run(engine.generate(HELLO)).content == "a"
    with pytest.raises(BudgetExceeded):
        asyncio.run(engine.generate(HELLO))
    assert len(scripted.calls) == 1


# -- the ledger: reserve before, hold in flight, settle to the truth ----------------


def metered(tokens: int = 50, **kw: Any) -> MeteredEngine:
    return MeteredEngine(lambda m, t: Generation("an answer", usage=Usage(0, tokens)), **kw)


def test_the_prompt_is_held_before_the_call_and_the_completion_clamped_to_what_is_left() -> None:
    engine = metered(tokens=5000)
    prompt = prompt_tokens(engine, HELLO)
    run = RunContext(budget=Budget(max_tokens=prompt + 300))
    generation = asyncio.run(RunEngine.bind(engine, run).generate(HELLO))
    assert generation.usage == Usage(prompt, 300)  # asked for 1024, got what was left
    assert run.budget.used == engine.spent and run.budget.held_tokens == 0


def test_a_prompt_that_does_not_fit_is_refused_before_the_call_and_stops_the_run() -> None:
    engine = metered()
    run = RunContext(budget=Budget(max_tokens=prompt_tokens(engine, HELLO)))
    with pytest.raises(BudgetExceeded, match="prompt alone takes"):
        asyncio.run(RunEngine.bind(engine, run).generate(HELLO))
    assert engine.calls == 0 and run.budget.calls == 0
    # A hard stop: every other branch of the run sees it through the token.
    assert run.cancel.cancelled and isinstance(run.cancel.error(), BudgetExceeded)


def test_calls_in_flight_hold_their_reservation_so_concurrent_calls_see_less() -> None:
    engine = metered(tokens=5000, latency_s=0.05)
    prompt = prompt_tokens(engine, HELLO)
    run = RunContext(budget=Budget(max_tokens=2 * prompt + 1500))
    bound = RunEngine.bind(engine, run)

    async def go() -> list[Any]:
        calls = [bound.generate(HELLO, options=SamplingOptions(max_tokens=1000)) for _ in range(2)]
        return list(await asyncio.gather(*calls))

    results = asyncio.run(go())
    # Both are in flight at once: the first holds 1000, so the second gets the 500 left.
    assert [r.usage.completion_tokens for r in results] == [1000, 500]
    assert engine.spent.total_tokens == run.budget.max_tokens
    assert run.budget.used == engine.spent and run.budget.held_tokens == 0


@pytest.mark.parametrize("how", ["cancel", "stop reading"])
def test_an_interrupted_stream_is_charged_its_prompt_and_the_tokens_streamed(how: str) -> None:
    engine = metered(tokens=1000, token_latency_s=0.01)
    run = RunContext(budget=Budget(max_tokens=100_000))
    bound = RunEngine.bind(engine, run)

    async def go() -> int:
        received = 0
        stream = bound.stream(HELLO)
        async for chunk in stream:
            received += bool(chunk.delta)
            if received == 7:
                if how == "stop reading":
                    break
                run.cancel.cancel("stop")
        await stream.aclose()  # type: ignore[attr-defined]
        return received

    if how == "cancel":
        with pytest.raises(Cancelled):
            asyncio.run(go())
    else:
        assert asyncio.run(go()) == 7
    assert run.budget.used == Usage(prompt_tokens(engine, HELLO), 7) == engine.spent
    assert run.budget.held_tokens == 0 and run.budget.calls == 1


def test_a_cancelled_call_is_charged_its_prompt() -> None:
    engine = metered(latency_s=30)
    run = RunContext(budget=Budget(max_tokens=100_000))

    async def go() -> None:
        asyncio.get_running_loop().call_later(0.1, run.cancel.cancel, "stop")
        await RunEngine.bind(engine, run).generate(HELLO)

    with pytest.raises(Cancelled):
        asyncio.run(go())
    assert run.budget.used == Usage(prompt_tokens(engine, HELLO), 0) == engine.spent


def test_a_call_that_never_reached_the_engine_is_given_back() -> None:
    run = RunContext(budget=Budget(max_calls=1, max_tokens=10_000))
    scripted = ScriptedEngine([EngineUnavailable("down"), reply("ok")])
    bound = RunEngine.bind(scripted, run)
    with pytest.raises(EngineUnavailable):
        asyncio.run(bound.generate(HELLO))
    assert run.budget.calls == 0 and run.budget.used == Usage() and run.budget.held_tokens == 0
    assert asyncio.run(bound.generate(HELLO)).content == "ok"  # the one call is still there


def test_an_engine_that_reports_no_usage_is_charged_a_count() -> None:
    run = RunContext(budget=Budget(max_tokens=10_000))
    scripted = ScriptedEngine([reply("four words of text", usage=Usage(0, 0))])
    asyncio.run(RunEngine.bind(scripted, run).generate(HELLO))
    # No tokenizer: the prompt as bounded, and the reply's UTF-8 bytes.
    assert run.budget.used == Usage(prompt_tokens(scripted, HELLO), len("four words of text"))


def test_the_prompt_bound_uses_the_engines_tokenizer_else_utf8_bytes() -> None:
    text = "héllo wörld " * 10
    messages = [Message.user(text)]
    words = prompt_tokens(metered(), messages)
    assert words == prompt_tokens(metered(), [Message.user("")]) + 20
    scripted = prompt_tokens(ScriptedEngine(), messages)
    assert scripted - words == len(text.encode()) - 20
    tools = [ToolSpec("calc", "adds numbers")]
    assert prompt_tokens(ScriptedEngine(), messages, tools) > scripted + 256
