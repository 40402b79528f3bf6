"""Inference gateway overhead: one OpenAI chat-completions request through the gateway
(HTTP on loopback, token check, dialect translation, RunEngine) against the same engine
called directly, interleaved call by call. Over the scripted engine the difference is
all gateway; over the embedded SmolLM2 (8 tokens, temperature 0) it is the same
difference next to real inference."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from benchmarks.harness import BenchEnv, Row, percentile

TARGET_MS = 5.0


async def _paired(
    direct: Callable[[], Awaitable[object]],
    gateway: Callable[[], Awaitable[object]],
    runs: int,
    warmups: int = 3,
) -> tuple[list[float], list[float]]:
    base: list[float] = []
    ours: list[float] = []
    for i in range(runs + warmups):  # the first ones warm both paths up
        for fn, sink in ((direct, base), (gateway, ours)):
            start = time.perf_counter()
            await fn()
            if i >= warmups:
                sink.append((time.perf_counter() - start) * 1000)
    return base, ours


class _RawClient:
    """A minimal keep-alive HTTP/1.1 client: what is measured is the gateway, not a
    client library (httpx alone costs about 1.5 ms a request on these machines; an
    agent's own client is the agent's cost either way)."""

    def __init__(self, port: int, token: str, body: bytes) -> None:
        self.port = port
        self.request = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    async def __aenter__(self) -> _RawClient:
        self.writer: asyncio.StreamWriter | None = None
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()

    async def post(self) -> bytes:
        if self.writer is None:
            # Connected at the first request, as an agent's client does: the gateway
            # closes a connection that sends no request head within 5 s, and the first
            # direct call (a model load) may take longer than that.
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(self.request)
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200 "):
            raise RuntimeError(head.decode(errors="replace"))
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        return await self.reader.readexactly(length)


async def _measure(
    engine: object, runs: int, max_tokens: int, warmups: int = 3
) -> tuple[list[float], list[float]]:
    from jarvisd import Message, SamplingOptions
    from jarvisd._runcontext import RunContext
    from jarvisd.engines import Engine
    from jarvisd.gateway import Gateway

    assert isinstance(engine, Engine)
    messages = [Message.user("Name three primary colors.")]
    options = SamplingOptions(temperature=0.0, max_tokens=max_tokens)
    body = {"model": "any", "temperature": 0, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "Name three primary colors."}]}  # fmt: skip

    async with Gateway(engine, RunContext(), max_tokens=max_tokens) as gw:
        assert gw.url is not None
        port = int(gw.url.rsplit(":", 1)[1])
        async with _RawClient(port, gw.token, json.dumps(body).encode()) as client:

            async def direct() -> object:
                return await engine.generate(messages, options=options)

            return await _paired(direct, client.post, runs, warmups)


def _row(name: str, base: list[float], ours: list[float], baseline_name: str) -> Row:
    p50, b50 = percentile(ours, 50), percentile(base, 50)
    overhead = percentile([o - b for o, b in zip(ours, base, strict=True)], 50)
    return Row(
        name,
        p50,
        "ms",
        baseline=b50,
        baseline_name=baseline_name,
        target=f"<= {TARGET_MS:.0f} ms more at p50",
        passed=overhead <= TARGET_MS,
        notes=f"+{overhead:.2f} ms at p50 (paired); p95 {percentile(ours, 95):.1f} vs "
        f"{percentile(base, 95):.1f} ms; {len(ours)} interleaved calls; OpenAI chat "
        "completions over loopback TCP, keep-alive, minimal client",
        extra={"overhead_p50_ms": overhead},
    )


def run(env: BenchEnv) -> list[Row]:
    from jarvisd.engines import ScriptedEngine, reply

    rows = []
    scripted = ScriptedEngine(fallback=reply("Red, yellow and blue."))
    base, ours = asyncio.run(_measure(scripted, env.runs(200, 30), 64, env.warmups(3)))
    rows.append(_row("gateway overhead per inference call, scripted engine (p50)", base, ours,
                     "engine.generate called directly"))  # fmt: skip
    rows.append(_model_row(env))
    return rows


def _model_row(env: BenchEnv) -> Row:
    from jarvisd._paths import paths
    from jarvisd.catalog import get_entry, model_file
    from jarvisd.engines._llamacpp import LlamaCppEngine, llama_cpp_available

    name = "smollm2-135m"
    title = f"gateway overhead per inference call, {name} (p50)"
    path = model_file(get_entry(name), paths().models)
    if not llama_cpp_available() or not path.is_file():
        return Row(title, float("nan"), "ms", notes=f"skipped: {name} or llama-cpp missing")
    engine = LlamaCppEngine(str(path), n_ctx=1024)

    async def measure() -> tuple[list[float], list[float]]:
        try:
            return await _measure(engine, env.runs(30, 8), 8, env.warmups(3))
        finally:
            await engine.aclose()

    base, ours = asyncio.run(measure())
    return _row(title, base, ours, "engine.generate called directly")
