"""The executor seam's timeout clock: time the program spends waiting on the host (its
inference requests) does not count toward its timeout."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from jarvisd.executors import Clock, ExecRequest, SubprocessExecutor


def test_held_time_does_not_count() -> None:
    clock = Clock(10.0)
    clock.hold()
    clock.hold()  # concurrent inference requests nest
    assert clock.remaining() is None
    time.sleep(0.3)
    clock.release()
    assert clock.remaining() is None  # one request still out
    clock.release()
    remaining = clock.remaining()
    assert remaining is not None and 9.9 < remaining <= 10.0


async def _sleeper(hold_for: float) -> bool:
    """A program that sleeps 1.5 s under a 1 s timeout, with the clock held for the first
    ``hold_for`` seconds; True when it was killed for its timeout."""
    request = ExecRequest(argv=[sys.executable, "-c", "import time; time.sleep(1.5)"], timeout=1.0)
    channel = await SubprocessExecutor().open(request)
    if hold_for:
        with channel.clock_held():
            await asyncio.sleep(hold_for)
    result = await channel.wait()
    return result.timed_out


def test_a_held_clock_keeps_the_program_alive_past_its_timeout() -> None:
    assert asyncio.run(_sleeper(0)) is True
    assert asyncio.run(_sleeper(1.0)) is False


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_held_time_is_credited_only_up_to_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # A program that keeps one request in flight while it computes: past max_held, the
    # waiting counts, so it cannot outlive its timeout by more than max_held.
    fake = FakeTime()
    monkeypatch.setattr(time, "monotonic", fake)
    clock = Clock(5.0, max_held=20.0)
    clock.hold()
    fake.now += 19.0
    assert clock.remaining() is None  # within the cap: it cannot expire
    fake.now += 3.0
    assert clock.remaining() == pytest.approx(3.0)  # 2 s past the cap counted
    fake.now += 3.0
    assert clock.remaining() == pytest.approx(0.0)
    clock.release()
    assert clock.remaining() == pytest.approx(0.0)


def test_the_default_cap_is_a_multiple_of_the_timeout() -> None:
    assert Clock(3.0).max_held == 3.0 * Clock.HELD_FACTOR
