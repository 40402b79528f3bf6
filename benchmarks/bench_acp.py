"""`jarvis acp` rows: from spawn to `initialize` answered (an editor waits for this when
it starts the agent), and the per-prompt overhead of a prompt through `jarvis acp`
(the SDK's client side, a long-lived agent process) over the same run through
`jarvis ask`'s in-process host, on a scripted engine behind the Ollama API."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

from benchmarks.harness import BenchEnv, Row, median, percentile

INIT = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n'


def _answered_in(command: list[str], request: bytes) -> tuple[float, bytes]:
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(request)
    proc.stdin.flush()
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.stdout.close()
    proc.wait(60)
    return elapsed, line


def _spawn_row(env: BenchEnv) -> list[Row]:
    """Interleaved with `jarvis --help` (the CLI's own start-up, the floor here)."""
    ours: list[float] = []
    floor: list[float] = []
    for i in range(env.warmups() + env.runs(15, 5)):
        elapsed, line = _answered_in([env.jarvis_bin(), "acp"], INIT)
        help_elapsed, _ = _answered_in([env.jarvis_bin(), "--help"], b"")
        if b'"result"' not in line:
            return [Row("`jarvis acp` spawn to initialize answered", float("nan"), "ms",
                        notes=f"no answer: {line[:200]!r}")]  # fmt: skip
        if i >= env.warmups():
            ours.append(elapsed)
            floor.append(help_elapsed)
    p50 = median(ours) * 1000
    return [
        Row(
            "`jarvis acp` spawn to initialize answered",
            p50,
            "ms",
            baseline=median(floor) * 1000,
            baseline_name="`jarvis --help` to its first line",
            target="<= 150 ms",
            passed=p50 <= 150,
            notes=f"p95 {percentile(ours, 95) * 1000:.0f} ms; answered before the ACP SDK loads",
        )
    ]


def _prompt_row(env: BenchEnv) -> list[Row]:
    import acp
    from acp import schema

    from jarvisd._runcontext import RunContext
    from jarvisd.engines import ScriptedEngine, reply
    from jarvisd.runs import AgentSpec, LocalHost
    from jarvisd.testing import OllamaStandIn

    class Quiet:
        async def session_update(self, session_id: str, update: object, **_: object) -> None:
            return None

        async def request_permission(self, *args: object, **kwargs: object) -> object:
            raise RuntimeError("not asked in this benchmark")

    runs = env.runs(30, 8)
    engine = ScriptedEngine(fallback=reply("Red, yellow and blue."))
    with OllamaStandIn(engine) as standin:
        process_env = dict(os.environ, OLLAMA_HOST=standin.url)
        process_env["JARVIS_RUNTIME_DIR"] = str(env.tmp / "acp-runtime")
        process_env["JARVIS_DATA_DIR"] = str(env.tmp / "acp-data")

        async def through_acp() -> list[float]:
            times: list[float] = []
            command = [env.jarvis_bin(), "acp", "--engine", "ollama", "--model", "scripted"]
            async with acp.spawn_agent_process(Quiet(), *command, env=process_env) as (conn, _):  # type: ignore[arg-type]
                await conn.initialize(protocol_version=acp.PROTOCOL_VERSION,
                                      client_capabilities=schema.ClientCapabilities())  # fmt: skip
                sid = (await conn.new_session(cwd=str(env.tmp), mcp_servers=[])).session_id
                for i in range(env.warmups() + runs):
                    start = time.perf_counter()
                    await conn.prompt(session_id=sid, prompt=[acp.text_block("Name three colors.")])
                    if i >= env.warmups():
                        times.append(time.perf_counter() - start)
            return times

        acp_times = asyncio.run(through_acp())
        spec = AgentSpec(input="Name three colors.", engine="ollama", model="scripted",
                         env={"OLLAMA_HOST": standin.url})  # fmt: skip
        host = LocalHost()
        ask_times: list[float] = []
        for i in range(env.warmups() + runs):
            start = time.perf_counter()
            host.run(spec, RunContext(on_delta=lambda _text: None))
            if i >= env.warmups():
                ask_times.append(time.perf_counter() - start)
    ours, base = median(acp_times) * 1000, median(ask_times) * 1000
    return [
        Row(
            "`jarvis acp` prompt vs the same run through `jarvis ask` in process (scripted)",
            ours,
            "ms",
            baseline=base,
            baseline_name="LocalHost().run(spec) (jarvis ask's in-process path)",
            target="<= +20 ms at p50",
            passed=ours - base <= 20,
            notes=f"overhead {ours - base:+.1f} ms at p50; p95 {percentile(acp_times, 95) * 1000:.0f}"
            f" vs {percentile(ask_times, 95) * 1000:.0f} ms",
        )
    ]


def run(env: BenchEnv) -> list[Row]:
    return [*_spawn_row(env), *_prompt_row(env)]
