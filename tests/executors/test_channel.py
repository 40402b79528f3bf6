"""The channel seam's wait and stop: the program is reaped once, and every caller gets
that one result."""

from __future__ import annotations

import asyncio
import sys

from jarvisd.executors import Channel, ExecRequest, ExecResult, SubprocessExecutor

PROGRAM = "import sys, time; print('partial output', flush=True); time.sleep(60)"


async def _open() -> Channel:
    request = ExecRequest(argv=[sys.executable, "-c", PROGRAM], timeout=60.0)
    channel = await SubprocessExecutor().open(request)
    await asyncio.sleep(0.5)  # the program has printed, and sleeps
    return channel


def test_a_stop_while_another_task_waits_gives_both_the_same_result() -> None:
    """A reader waits for the program to end while the run stops it. Each used to
    reap it on its own: two reads of one stream, and one of them lost the output."""

    async def go() -> tuple[ExecResult, ExecResult]:
        channel = await _open()
        waiting = asyncio.ensure_future(channel.wait())
        await asyncio.sleep(0.1)
        stopped = await asyncio.wait_for(channel.stop("closed"), 10)
        return await asyncio.wait_for(waiting, 10), stopped

    waited, stopped = asyncio.run(go())
    assert waited is stopped
    assert stopped.reason == "closed" and stopped.stdout == "partial output\n"


def test_a_cancelled_wait_leaves_the_reaping_to_the_next_waiter() -> None:
    async def go() -> ExecResult:
        channel = await _open()
        first = asyncio.ensure_future(channel.wait())
        await asyncio.sleep(0.1)
        first.cancel()
        result = await asyncio.wait_for(channel.stop("closed"), 10)
        assert first.cancelled()
        return result

    result = asyncio.run(go())
    assert result.stdout == "partial output\n" and result.reason == "closed"
