"""A served agent's overhead (``jarvis serve``, issue 34): one ``agent:orchestrator``
request on ``/v1/chat/completions`` (HTTP on loopback, token check, the task built from
the messages, the run on the server's loop, the answer and its events back), against
the same run through ``jarvis ask``'s in-process host (``LocalHost``), interleaved
request by request, on a scripted engine with no latency: the difference is all the
server's. Streamed and not streamed."""

from __future__ import annotations

import http.client
import json
import os
import time
from pathlib import Path

from benchmarks.harness import BenchEnv, Row, percentile

#: The per-prompt overhead target of issue 34 (ACP's, the same for a served agent).
TARGET_MS = 20.0
TASK = "What is 17*23?"


def run(env: BenchEnv) -> list[Row]:
    # Runs are recorded for `jarvis trace` on both paths: in this run's own directory.
    os.environ["JARVIS_STATE_DIR"] = str(Path(env.tmp) / "serve-state")
    os.environ["JARVIS_DATA_DIR"] = str(Path(env.tmp) / "serve-data")
    from jarvisd._config import Config
    from jarvisd._runcontext import RunContext
    from jarvisd.engines import ScriptedEngine, reply
    from jarvisd.http.serve import OllamaServer, ServedAgents
    from jarvisd.runs import AgentSpec, LocalHost

    def answer(messages: object, tools: object) -> object:
        return reply("It is 391.")

    engine = ScriptedEngine(fallback=answer)  # type: ignore[arg-type]
    config = Config()
    token = "b" * 32
    agents = ServedAgents(config, agents=("orchestrator",), tools=("calculator",))
    spec = AgentSpec(input=TASK, agent="orchestrator", tools=("calculator",))
    host = LocalHost(config, engine)
    rows = []
    with OllamaServer(engine, port=0, agents=agents, token=token) as server:
        port = int(server.url.rsplit(":", 1)[1])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for stream in (False, True):
            body = json.dumps({"model": "agent:orchestrator", "stream": stream,
                               "messages": [{"role": "user", "content": TASK}]})  # fmt: skip
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            base: list[float] = []
            ours: list[float] = []
            runs, warmups = env.runs(100, 15), env.warmups(5)
            for i in range(runs + warmups):
                start = time.perf_counter()
                outcome = host.run(spec, RunContext())
                took = (time.perf_counter() - start) * 1000
                assert outcome.answer == "It is 391.", outcome
                if i >= warmups:
                    base.append(took)
                start = time.perf_counter()
                connection.request("POST", "/v1/chat/completions", body, headers)
                response = connection.getresponse()
                data = response.read()
                took = (time.perf_counter() - start) * 1000
                assert response.status == 200 and b"391" in data, data[:300]
                if i >= warmups:
                    ours.append(took)
            rows.append(_row(stream, base, ours))
        connection.close()
    return rows


def _row(stream: bool, base: list[float], ours: list[float]) -> Row:
    p50_base, p50_ours = percentile(base, 50), percentile(ours, 50)
    over = p50_ours - p50_base
    kind = "streamed" if stream else "not streamed"
    return Row(
        f"served agent:orchestrator over `jarvis ask` in process, {kind} (p50 overhead)",
        round(over, 2),
        "ms",
        baseline=round(p50_base, 2),
        baseline_name="LocalHost.run (jarvis ask in process), same scripted run",
        target=f"<= +{TARGET_MS:g} ms",
        passed=over <= TARGET_MS,
        notes=f"served p50 {p50_ours:.2f} ms, {len(ours)} requests",
        extra={
            "served_p50_ms": round(p50_ours, 2),
            "ask_p50_ms": round(p50_base, 2),
            "served_p90_ms": round(percentile(ours, 90), 2),
        },
    )
