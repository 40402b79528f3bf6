"""``jarvis serve-model`` streams to several clients at once on its one loop, and a
client that hangs up mid-stream stops its own generation, not the others', even while
the model is silent (the server watches the connection, not only its writes)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence

from jarvisd._messages import Message, SamplingOptions, StreamChunk, ToolSpec
from jarvisd.engines import ScriptedEngine
from jarvisd.http.serve import OllamaServer

OPTIONS = SamplingOptions()


class EndlessEngine(ScriptedEngine):
    """Streams ten words, then stays silent until its stream is closed."""

    started = 0
    closed = 0

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        import asyncio

        self.started += 1
        try:
            for _ in range(10):
                yield StreamChunk(delta="word ")
            await asyncio.sleep(3600)
        finally:
            self.closed += 1


def wait_for(predicate: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def open_stream(server: OllamaServer) -> socket.socket:
    body = json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "hi"}]})
    sock = socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), 30)
    head = f"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n\r\n"
    sock.sendall(head.encode() + body.encode())
    return sock


def read_lines(sock: socket.socket, count: int) -> int:
    """Read until ``count`` NDJSON lines of a partial reply have come; how many did."""
    data = b""
    while data.count(b'"done": false') < count:
        more = sock.recv(65536)
        assert more, "the stream ended"
        data += more
    return data.count(b'"done": false')


def test_two_streams_at_once_and_a_hangup_stops_only_its_own() -> None:
    engine = EndlessEngine()
    with OllamaServer(engine, port=0) as server:
        first, second = open_stream(server), open_stream(server)
        try:
            assert read_lines(first, 10) == 10
            assert read_lines(second, 10) == 10  # both open at once, both served
            assert engine.started == 2 and engine.closed == 0
            # Seen while the model is silent (nothing to write that could fail).
            first.close()
            wait_for(lambda: engine.closed == 1)
            second.settimeout(0.5)
            try:
                assert second.recv(1) == b"", "the other stream was ended"
            except TimeoutError:
                pass  # still open, still waiting on its model
        finally:
            first.close()
            second.close()
        wait_for(lambda: engine.closed == 2)
