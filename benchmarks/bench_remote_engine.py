"""A sandboxed run on an engine reached over TCP with TLS, against the local socket.

The same sandboxed ``simple`` agent run (``run_spec`` with ``isolation="sandbox"``, a
scripted engine on the host: create + attach + start a hardened container, the runner
asks the host for inference over frames, the container is removed) on two engines on
this machine: the private engine on its unix socket, and a second private engine on
loopback TCP with TLS client certificates (``tests/sandbox/tls_engine.py`` starts it and
copies the image into it). Interleaved A B A B. Target (issue 33): at most 1.3x at p50.
TLS costs a handshake per connection (the SDK's pool keeps one for the short calls; each
attach stream is a connection of its own, two over TLS: see ``attach_streams``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time

from benchmarks.bench_sandbox import _problem
from benchmarks.harness import BenchEnv, Row, percentile

TARGET = 1.3
NAME = "sandboxed simple run, TCP+TLS engine on loopback vs local socket (p50)"


def run(env: BenchEnv) -> list[Row]:
    from jarvisd._config import Config, SandboxConfig
    from jarvisd._runcontext import RunContext
    from jarvisd.engines import ScriptedEngine
    from jarvisd.runs import AgentSpec, run_spec
    from tests.sandbox.tls_engine import start_tls_engine

    local = Config()
    image = local.sandbox.image
    problem = _problem(image)
    if not problem and (os.geteuid() != 0 or not shutil.which("openssl")):
        problem = "a second dockerd needs root and openssl"
    if problem:
        return [Row(NAME, float("nan"), "s", target=f"<= {TARGET}x", passed=None,
                    notes=f"skipped: {problem}")]  # fmt: skip
    engine = start_tls_engine(image, {"DOCKER_HOST": os.environ.get("DOCKER_HOST", "")})
    try:
        tls = Config(
            sandbox=SandboxConfig(docker_host=engine.address, docker_tls=str(engine.certs))
        )
        spec = AgentSpec(input="hello", agent="simple", isolation="sandbox")
        runs = env.runs(20, 5)

        async def sandboxed(config: Config) -> float:
            scripted = ScriptedEngine.from_replies(["hi"])
            start = time.perf_counter()
            result = await run_spec(spec, RunContext(), config, scripted)
            elapsed = time.perf_counter() - start
            assert result.answer == "hi", result.failure
            return elapsed

        ours: list[float] = []
        base: list[float] = []

        async def measure() -> None:
            await sandboxed(tls)  # warm-up: bytecode, connections, page cache
            await sandboxed(local)
            for _ in range(runs):
                ours.append(await sandboxed(tls))
                base.append(await sandboxed(local))

        asyncio.run(measure())
    finally:
        engine.stop()
    a, b = percentile(ours, 50), percentile(base, 50)
    return [
        Row(NAME, a, "s", baseline=b, baseline_name="the same run on the local unix socket",
            target=f"<= {TARGET}x", passed=a <= TARGET * b,
            notes=f"{runs} runs interleaved; p95 {percentile(ours, 95):.3f} vs "
            f"{percentile(base, 95):.3f} s; both engines on this machine, the second on "
            "127.0.0.1 with TLS client certificates")
    ]  # fmt: skip
