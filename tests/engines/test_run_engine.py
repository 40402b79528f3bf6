"""RunEngine: one wrapper per run and engine, racing the run's cancel token."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from jarvisd._messages import Message
from jarvisd._run import Budget, BudgetExceeded, Cancelled, RunContext
from jarvisd.engines import RunEngine, ScriptedEngine, reply

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
