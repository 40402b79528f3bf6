"""The run's ledger and cancel token on their own: holds, warnings, the wall clock."""

from __future__ import annotations

import asyncio

import pytest

from jarvisd._events import Event, EventType
from jarvisd._messages import Usage
from jarvisd._runcontext import Budget, BudgetExceeded, Cancelled, RunContext, watch_wall


def warnings_of(run: RunContext) -> list[Event]:
    events: list[Event] = []
    run.bus.subscribe(events.append, EventType.BUDGET_WARNING)
    return events


def test_a_hold_is_ended_once_and_a_released_one_stops_counting() -> None:
    budget = Budget(max_tokens=1000, max_calls=2)
    hold = budget.reserve(100, 400)
    assert (hold.prompt_tokens, hold.completion_tokens, budget.held_tokens) == (100, 400, 500)
    hold.settle(Usage(90, 10))
    hold.settle(Usage(90, 10))  # a second end changes nothing
    hold.release()
    assert budget.used == Usage(90, 10) and budget.held_tokens == 0 and budget.calls == 1
    never_ran = budget.reserve(10, 10)
    never_ran.release()
    assert budget.calls == 1 and budget.used == Usage(90, 10)
    budget.reserve_tool_call().release()
    assert budget.tool_calls == 0


def test_the_completion_is_clamped_to_what_is_left_after_everything_held() -> None:
    budget = Budget(max_tokens=1000)
    budget.reserve(100, 600)
    assert budget.reserve(100, 600).completion_tokens == 200
    with pytest.raises(BudgetExceeded, match="token budget of 1000 spent"):
        budget.reserve(1, 1)


def test_one_warning_per_dimension_when_it_reaches_warn_at() -> None:
    run = RunContext(budget=Budget(max_tokens=1000, max_calls=4, max_tool_calls=2, warn_at=0.5))
    events = warnings_of(run)
    budget = run.budget
    budget.reserve(0, 600).settle(Usage(300, 100))  # 400 of 1000: none yet
    assert events == []
    budget.reserve(0, 100).settle(Usage(50, 50))  # 500: tokens; 2 of 4 calls: calls
    budget.reserve_tool_call()
    budget.reserve(0, 100).settle(Usage(50, 50))
    assert [(e.data["dimension"], e.data["used"], e.data["limit"]) for e in events] == [
        ("calls", 2, 4), ("tokens", 500, 1000), ("tool_calls", 1, 2),
    ]  # fmt: skip


def test_no_warning_when_warn_at_is_zero() -> None:
    run = RunContext(budget=Budget(max_calls=1, warn_at=0))
    events = warnings_of(run)
    run.budget.reserve(0, 1)
    assert events == []


def test_the_wall_clock_warns_then_stops_the_whole_run_with_budget_exceeded() -> None:
    run = RunContext(budget=Budget(max_wall=0.2, warn_at=0.5))
    events = warnings_of(run)

    async def go() -> None:
        disarm = watch_wall(run)
        try:
            await run.cancel.wait()
        finally:
            disarm()

    asyncio.run(go())
    assert [e.data["dimension"] for e in events] == ["wall"]
    with pytest.raises(BudgetExceeded, match=r"wall-clock budget of 0\.2 s spent"):
        run.cancel.raise_if_cancelled()
    # And no new call starts once the time is spent, armed or not.
    with pytest.raises(BudgetExceeded, match="wall-clock"):
        Budget(max_wall=0.0).reserve(0, 1)


def test_a_cancel_says_which_stop_it_is() -> None:
    run = RunContext()
    run.cancel.cancel("user stop")
    run.cancel.cancel("later", stop=BudgetExceeded)  # the first reason stays
    assert isinstance(run.cancel.error(), Cancelled) and str(run.cancel.error()) == "user stop"
