"""The ask pool checks, once a worker is free and right before it sends a question,
whether the asker is still there: a client that left while its question waited must
not have it reach the engine (the daemon's own look at the client runs only once a
second, and a worker can free up in between)."""

from __future__ import annotations

import asyncio

from jarvisd._config import parse_config
from jarvisd._runcontext import CancelToken
from jarvisd.daemon._askpool import AskPool
from jarvisd.runs import AgentSpec, RunOutcome


def test_a_question_whose_asker_left_is_not_sent_when_a_worker_frees_up() -> None:
    # An engine nobody listens on: a question sent anyway ends as an engine failure,
    # not as "cancelled".
    config = parse_config(
        {"engine": {"default": "ollama", "ollama": {"host": "http://127.0.0.1:9"}}}
    )

    async def ask() -> tuple[list[object], CancelToken]:
        pool = AskPool(lambda: config)
        await pool.start()
        cancel = CancelToken()
        try:
            spec = AgentSpec(input="a question", agent="simple")
            items = [item async for item in pool.ask(spec, cancel, gone=lambda: True)]
        finally:
            await pool.stop()
        return items, cancel

    items, cancel = asyncio.run(ask())
    assert len(items) == 1 and isinstance(items[0], RunOutcome), items
    assert items[0].failure is not None and items[0].failure.code == "cancelled", items[0]
    assert cancel.cancelled and cancel.reason == "the client disconnected"
