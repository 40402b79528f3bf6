"""A chat for ``agent:NAME`` or ``team:NAME`` as the model server answers it: one run
(``_agents``) turned into a ``chat.completion`` or a stream of chunks.

Everything happens on the server's loop. The run is a task of its own; this handler
reads its :class:`~._agents.Outbox`. A client that hangs up cancels the handler (the
HTTP server watches the connection), which stops the run through its token and waits
for it to end (:func:`~._agents.wait_out`), so its containers are gone when the
connection is. A client that stops reading blocks the writes, the outbox fills, and
the run is cancelled at its bound; the connection is then dropped (:class:`Hangup`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ...gateway import _common as c
from ...gateway import _openai_chat as openai_chat
from .._server import Hangup, Response
from . import _agents as served

if TYPE_CHECKING:
    from ..._runcontext import RunContext
    from ...engines import Engine
    from ...runs import RunOutcome

__all__ = ["agent_chat"]

log = logging.getLogger(__name__)

_JSON = "application/json; charset=utf-8"
Items = list[tuple[str, Any]]


def _error(status: int, message: str) -> Response:
    return Response(status, json.dumps(openai_chat.error(status, message)).encode(), _JSON)


async def agent_chat(raw: dict[str, Any], agents: served.ServedAgents, engine: Engine) -> Response:
    """The reply to a chat request for one of ``agents``' models (``raw``: its body)."""
    spec = agents.spec(raw)
    stream = c.flag(raw.get("stream"), "stream")
    options = c.opt_obj(raw.get("stream_options"), "stream_options")
    include_usage = c.flag(options.get("include_usage"), "include_usage")
    run, outbox, task = agents.start(spec, engine)
    handed = False
    try:
        if not stream:
            return await _whole(raw["model"], run, outbox, task)
        items = await _first_items(outbox, task)
        if outbox.overflowed:
            raise Hangup("the client is not reading the answer")
        if task.done() and not items:
            failure = task.result().failure
            if failure is not None:  # failed before any output: a proper status
                return _error(served.failure_status(failure.code), failure.message)
        encoder = served.AgentStream(raw["model"], include_usage)
        body = _stream(encoder, items, run, outbox, task)
        handed = True
        return Response(200, content_type="text/event-stream", stream=body)
    finally:
        if not handed and not task.done():
            await served.wait_out(run, task, "the client went away")


async def _first_items(outbox: served.Outbox, task: asyncio.Task[RunOutcome]) -> Items:
    """The run's first output, waited for up to ``HEADER_WAIT`` (a run that fails at
    once still gets a proper status)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + served.HEADER_WAIT
    items: Items = []
    while not items and not task.done() and (left := deadline - loop.time()) > 0:
        items = await outbox.take(min(left, served.POLL))
    return items + await outbox.take(0)


async def _whole(
    model: str, run: RunContext, outbox: served.Outbox, task: asyncio.Task[RunOutcome]
) -> Response:
    events: list[dict[str, Any]] = []
    dropped = 0
    while True:
        done = task.done()
        items = await outbox.take(0 if done else served.POLL)
        if outbox.overflowed:
            raise Hangup("the client is not reading the answer")
        for kind, payload in items:
            if kind != "event":
                continue
            if len(events) < served.MAX_EVENTS:
                events.append(payload)
            else:
                dropped += 1
        if done:
            break
    outcome = task.result()
    if outcome.failure is not None:
        return _error(served.failure_status(outcome.failure.code), outcome.failure.message)
    jarvis: dict[str, Any] = {"events": events, "run": served.run_summary(outcome)}
    if dropped:
        jarvis["events_dropped"] = dropped
    message = {"role": "assistant", "content": outcome.answer}
    encoder = served.AgentStream(model, False)
    body = {
        **encoder.base,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
        "usage": run.budget.used.to_dict(),
        "jarvis": jarvis,
    }
    return Response(200, json.dumps(body).encode(), _JSON)


async def _stream(
    encoder: served.AgentStream,
    items: Items,
    run: RunContext,
    outbox: served.Outbox,
    task: asyncio.Task[RunOutcome],
) -> AsyncIterator[bytes]:
    """The chunks of a streamed run: its text and events as they come, a keep-alive
    comment while it is silent, its end (or its failure) last."""
    loop = asyncio.get_running_loop()
    try:
        yield encoder.start()
        last = loop.time()
        while True:
            done = task.done()
            items += await outbox.take(0 if done or items else served.POLL)
            if outbox.overflowed:
                raise Hangup("the client is not reading the answer")
            shown = [p for kind, p in items if kind == "event"]
            text = "".join(p for kind, p in items if kind == "delta")
            if shown:
                yield encoder.events(shown)
            if text:
                yield encoder.delta(text)
            now = loop.time()
            if items:
                last = now
            elif now - last > served.KEEPALIVE:
                yield b": keep-alive\n\n"
                last = now
            items = []
            if done:
                break
        async for chunk in _end(encoder, run, outbox, task):
            yield chunk
    finally:
        if not task.done():
            await served.wait_out(run, task, "the client went away")


async def _end(
    encoder: served.AgentStream,
    run: RunContext,
    outbox: served.Outbox,
    task: asyncio.Task[RunOutcome],
) -> AsyncIterator[bytes]:
    outcome = task.result()
    failure = outcome.failure
    if failure is not None:
        yield encoder.fail(served.failure_status(failure.code), failure.message)
        return
    if not outbox.streamed and outcome.answer:  # a team answers whole, not streamed
        yield encoder.delta(outcome.answer)
    yield encoder.finish(run.budget.used.to_dict(), served.run_summary(outcome))
