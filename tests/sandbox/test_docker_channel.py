"""DockerChannel's stream, without an engine: the attach socket is a socketpair."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

from jarvisd.sandbox._docker import DockerChannel
from jarvisd.sandbox._policy import SandboxPolicy


class _Api:
    def wait(self, container_id: str, timeout: float) -> dict[str, Any]:
        return {"StatusCode": 0}

    def remove_container(self, container_id: str, force: bool) -> None:
        pass


def _frame(data: bytes) -> bytes:
    return bytes([1, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


def test_each_chunk_is_delivered_once_when_the_loop_is_slow() -> None:
    """The reader thread waits 1 s at a time for its put to land. When the event loop
    is busy longer than that (a loaded machine, a blocking call), the put still lands
    once the loop runs; the old code then put the chunk a second time."""

    async def go() -> list[bytes]:
        ours, engine = socket.socketpair()
        channel = DockerChannel(
            asyncio.get_running_loop(), _Api(), "c0ffee", ours, 60.0, None, SandboxPolicy()
        )
        total = 300  # more than the queue holds
        await asyncio.to_thread(
            engine.sendall, b"".join(_frame(b"line %d\n" % i) for i in range(total))
        )
        await asyncio.sleep(2.5)  # nobody reads: the reader's puts wait for room
        time.sleep(2.5)  # noqa: ASYNC251 - the loop itself is busy past the reader's 1 s
        lines = [await channel.readline() for _ in range(total)]
        engine.close()
        assert await channel.readline() == b""
        await channel.wait()
        return lines

    lines = asyncio.run(go())
    assert lines == [b"line %d\n" % i for i in range(300)]


def test_a_stop_while_another_task_waits_ends_both() -> None:
    """A reader waits for the program to end while the run stops it: both get the same
    result. Each used to drain the stream itself; the end-of-stream reached only one of
    them and the other waited for ever."""

    async def go() -> tuple[Any, Any]:
        ours, engine = socket.socketpair()
        channel = DockerChannel(
            asyncio.get_running_loop(), _Api(), "c0ffee", ours, 60.0, None, SandboxPolicy()
        )
        await asyncio.to_thread(engine.sendall, _frame(b"partial output"))
        waiting = asyncio.ensure_future(channel.wait())
        await asyncio.sleep(0.2)  # the waiter is blocked on the stream
        stopped = await asyncio.wait_for(channel.stop("closed"), 10)
        waited = await asyncio.wait_for(waiting, 10)
        engine.close()
        return waited, stopped

    waited, stopped = asyncio.run(go())
    assert waited is stopped
    assert stopped.reason == "closed" and stopped.stdout == "partial output"


def test_a_cancelled_wait_leaves_the_reaping_to_the_next_waiter() -> None:
    async def go() -> Any:
        ours, engine = socket.socketpair()
        channel = DockerChannel(
            asyncio.get_running_loop(), _Api(), "c0ffee", ours, 60.0, None, SandboxPolicy()
        )
        await asyncio.to_thread(engine.sendall, _frame(b"kept"))
        first = asyncio.ensure_future(channel.wait())
        await asyncio.sleep(0.2)
        first.cancel()
        engine.close()  # the program ends
        result = await asyncio.wait_for(channel.wait(), 10)
        assert first.cancelled()
        return result

    result = asyncio.run(go())
    assert result.stdout == "kept" and result.exit_code == 0
