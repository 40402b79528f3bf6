"""The replies that take time: an ``ask`` streamed from an ask worker, ``task.logs``
(replayed, then followed), ``task.wait``. Each is an async generator of replies the
server writes as they come; a client that goes away ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import socket
import time
from collections.abc import AsyncGenerator

from jarvisd._runcontext import CancelToken
from jarvisd.runs import RunOutcome
from jarvisd.runs._failures import to_wire

from ._askpool import AskPool
from ._protocol import (
    TERMINAL_STATES,
    Alive,
    Ask,
    Delta,
    ErrorReply,
    EventReply,
    Ok,
    Reply,
    ResultReply,
    TaskInfo,
    TaskLogs,
    TaskReply,
    TaskWait,
)
from ._store import TaskStore
from ._tasks import TaskManager

__all__ = ["peer_closed", "stream_ask", "stream_logs", "stream_wait", "wait_task"]

log = logging.getLogger(__name__)

_FOLLOW_POLL_S = 1.0
#: How often a running ask looks whether its client is still connected.
_CLIENT_CHECK_S = 1.0
#: The socket of the connection a request came on (set per connection task).
_peer: contextvars.ContextVar[socket.socket | None] = contextvars.ContextVar(
    "jarvisd_peer", default=None
)


def peer_closed(sock: socket.socket) -> bool:
    """Whether the client closed its end of ``sock`` (a transport's socket): a read
    would see end of file. Peeked through a duplicate, which leaves the stream as is."""
    try:
        with socket.fromfd(sock.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as dup:
            return dup.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False  # connected, nothing sent
    except OSError:
        return True


async def stream_ask(
    pool: AskPool, running: dict[str, CancelToken], request: Ask, peer: socket.socket | None
) -> AsyncGenerator[Reply, None]:
    """Answer in an ask worker (never in this process), streaming text and tool-call
    events as they come, then the outcome; ``alive`` every ``keepalive`` seconds
    while nothing else is sent. A client that goes away cancels the run."""
    queue: asyncio.Queue[Reply | None] = asyncio.Queue()
    cancel = CancelToken()
    if request.id:
        running[request.id] = cancel

    peer = _peer.get()

    def gone() -> bool:
        return peer is not None and peer_closed(peer)

    async def go() -> None:
        try:
            async for item in pool.ask(request.spec, cancel, gone=gone):
                if isinstance(item, RunOutcome):
                    queue.put_nowait(ResultReply(id=request.id, result=item.to_dict()))
                elif item.type == "inference_delta":
                    text = item.data.get("text")
                    if isinstance(text, str):
                        queue.put_nowait(Delta(id=request.id, text=text))
                else:
                    queue.put_nowait(
                        EventReply(
                            id=request.id, event=item.type, data=item.data, timestamp=time.time()
                        )
                    )
        except Exception as exc:
            log.exception("ask failed")
            code, message = to_wire(exc)
            queue.put_nowait(ErrorReply(id=request.id, code=code, message=message))
        finally:
            queue.put_nowait(None)

    worker = asyncio.create_task(go())
    quiet = 0.0
    try:
        while True:
            # Looked at every second: a client that went away while its question
            # waited for a worker must not have it sent to the engine after all.
            step = (
                _CLIENT_CHECK_S
                if request.keepalive is None
                else min(request.keepalive, _CLIENT_CHECK_S)
            )
            try:
                reply = await asyncio.wait_for(queue.get(), step)
            except TimeoutError:
                if peer is not None and peer_closed(peer):
                    cancel.cancel("the client disconnected")
                    log.info("ask %s: the client went away", request.id or "-")
                    break
                quiet += step
                if request.keepalive is not None and quiet >= request.keepalive:
                    quiet = 0.0
                    yield Alive(id=request.id)
                continue
            quiet = 0.0
            if reply is None:
                break
            yield reply
    finally:
        if running.get(request.id) is cancel:
            del running[request.id]
        if not worker.done():  # the client went away: stop the run
            cancel.cancel("the client disconnected")
            await asyncio.gather(worker, return_exceptions=True)


async def stream_logs(
    store: TaskStore, tasks: TaskManager, request: TaskLogs
) -> AsyncGenerator[Reply, None]:
    task_id = store.resolve(request.task)
    since = request.since
    quiet_since = time.monotonic()
    while True:
        changed = tasks.changed(task_id)
        state = store.get(task_id).state
        events = store.events(task_id, since)
        for event in events:
            since = event.seq
            yield type(event)(
                id=request.id,
                seq=event.seq,
                event=event.event,
                data=event.data,
                timestamp=event.timestamp,
            )
        if events:
            quiet_since = time.monotonic()
            continue  # there may be more than one page
        if not request.follow or state in TERMINAL_STATES:
            yield Ok(id=request.id, message=state)
            return
        keepalive = request.keepalive
        if keepalive is not None and time.monotonic() - quiet_since >= keepalive:
            yield Alive(id=request.id)
            quiet_since = time.monotonic()
        poll = _FOLLOW_POLL_S if keepalive is None else min(keepalive, _FOLLOW_POLL_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), poll)


async def wait_task(store: TaskStore, tasks: TaskManager, request: TaskWait) -> TaskInfo:
    task_id = store.resolve(request.task)
    deadline = None if request.timeout is None else time.monotonic() + request.timeout
    while True:
        changed = tasks.changed(task_id)
        info = store.get(task_id)
        if info.finished:
            return info
        left = _FOLLOW_POLL_S if deadline is None else deadline - time.monotonic()
        if left <= 0:
            return tasks.show(task_id)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), min(left, _FOLLOW_POLL_S))


async def stream_wait(
    store: TaskStore, tasks: TaskManager, request: TaskWait
) -> AsyncGenerator[Reply, None]:
    """``task.wait``: the task once finished (or at the timeout), with ``alive`` while
    it waits, so the client tells a long task from a stopped daemon (one that stops
    answering is an error there, not a hang)."""
    waiting = asyncio.ensure_future(wait_task(store, tasks, request))
    try:
        while not waiting.done():
            done, _ = await asyncio.wait({waiting}, timeout=request.keepalive)
            if not done:
                yield Alive(id=request.id)
        yield TaskReply(id=request.id, task=waiting.result())
    finally:
        waiting.cancel()
