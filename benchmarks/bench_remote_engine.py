"""A sandboxed run on an engine reached over TCP with TLS, against the local socket.

The same sandboxed ``simple`` agent run (``run_spec`` with ``isolation="sandbox"``, a
scripted engine on the host: create + attach + start a hardened container, the runner
asks the host for inference over frames, the container is removed) on two engines on
this machine: the private engine on its unix socket, and a second private engine on
loopback TCP with TLS client certificates (``tests/sandbox/tls_engine.py`` starts it and
copies the image into it). Interleaved A B A B. Target (issue 33): at most 1.3x at p50.
TLS costs a handshake per connection (the SDK's pool keeps one for the short calls; each
attach stream is a connection of its own, two over TLS: see ``attach_streams``).

Second row: the same run with a workspace mounted ``:rw`` (WORKSPACE_FILES files,
WORKSPACE_BYTES in all), on the TLS engine marked remote (``sandbox.docker_remote``: the
workspace and jarvis's code go in as an archive through a loader container, the
workspace comes back and is applied) against binds on the local socket. No target in
issue 33: it says what archives cost over binds.
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
ARCHIVE_NAME = (
    "sandboxed simple run with a :rw workspace, archives to a remote TCP+TLS engine vs "
    "binds on the local socket (p50)"
)
WORKSPACE_FILES = 200
WORKSPACE_BYTES = 2 << 20


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
                    notes=f"skipped: {problem}"),
                Row(ARCHIVE_NAME, float("nan"), "s", notes=f"skipped: {problem}")]  # fmt: skip
    engine = start_tls_engine(image, {"DOCKER_HOST": os.environ.get("DOCKER_HOST", "")})
    try:
        tls = Config(
            sandbox=SandboxConfig(docker_host=engine.address, docker_tls=str(engine.certs))
        )
        spec = AgentSpec(input="hello", agent="simple", isolation="sandbox")
        runs = env.runs(20, 5)
        root = env.tmp / "remote-engine"
        workspace = root / "ws"
        workspace.mkdir(parents=True, exist_ok=True)
        for i in range(WORKSPACE_FILES):
            (workspace / f"f{i:03}.py").write_bytes(b"x" * (WORKSPACE_BYTES // WORKSPACE_FILES))
        roots = (f"{root}:rw",)
        remote = Config(
            sandbox=SandboxConfig(docker_host=engine.address, docker_tls=str(engine.certs),
                                  docker_remote=True, allowed_roots=roots)
        )  # fmt: skip
        binds = Config(sandbox=SandboxConfig(allowed_roots=roots))
        mounted = AgentSpec(input="hello", agent="simple", isolation="sandbox",
                            mounts=(f"{workspace}:rw",))  # fmt: skip

        async def sandboxed(config: Config, spec: AgentSpec = spec) -> float:
            scripted = ScriptedEngine.from_replies(["hi"])
            start = time.perf_counter()
            result = await run_spec(spec, RunContext(), config, scripted)
            elapsed = time.perf_counter() - start
            assert result.answer == "hi", result.failure
            return elapsed

        ours: list[float] = []
        base: list[float] = []
        shipped: list[float] = []
        bound: list[float] = []

        async def measure() -> None:
            await sandboxed(tls)  # warm-up: bytecode, connections, page cache
            await sandboxed(local)
            for _ in range(runs):
                ours.append(await sandboxed(tls))
                base.append(await sandboxed(local))
            for _ in range(env.warmups()):
                await sandboxed(remote, mounted)
                await sandboxed(binds, mounted)
            for _ in range(runs):
                shipped.append(await sandboxed(remote, mounted))
                bound.append(await sandboxed(binds, mounted))

        asyncio.run(measure())
    finally:
        engine.stop()
    a, b = percentile(ours, 50), percentile(base, 50)
    c, d = percentile(shipped, 50), percentile(bound, 50)
    return [
        Row(NAME, a, "s", baseline=b, baseline_name="the same run on the local unix socket",
            target=f"<= {TARGET}x", passed=a <= TARGET * b,
            notes=f"{runs} runs interleaved; p95 {percentile(ours, 95):.3f} vs "
            f"{percentile(base, 95):.3f} s; both engines on this machine, the second on "
            "127.0.0.1 with TLS client certificates"),
        Row(ARCHIVE_NAME, c, "s", baseline=d,
            baseline_name="the same run, the workspace bind-mounted on the local socket",
            notes=f"{runs} runs interleaved; workspace {WORKSPACE_FILES} files, "
            f"{WORKSPACE_BYTES >> 20} MiB, plus jarvis's code, in by put_archive and back by "
            f"get_archive; p95 {percentile(shipped, 95):.3f} vs {percentile(bound, 95):.3f} s"),
    ]  # fmt: skip
