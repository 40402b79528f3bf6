"""Sandbox overhead: a sandboxed ``simple`` agent run against a plain ``docker run``.

Both start one container from the same image on the same engine, interleaved A B A B:

* ours: ``run_spec(AgentSpec(agent="simple", isolation="sandbox"))`` with a scripted engine on
  the host: create + attach + start a hardened container, the in-container runner
  imports jarvis, builds the agent, asks the host for inference over frames, returns
  the result; the container is removed.
* baseline: ``docker run --rm -i --network none --pull never IMAGE python3 -c pass``
  (the docker CLI, no hardening, no jarvis code).

Target (issue 3): at most 1.2 times the baseline at p50 and at p95. Rows are skipped
(passed=None, with the reason) when no engine or image is available.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time

from benchmarks.harness import BenchEnv, Row, percentile

TARGET = 1.2


def _problem(image: str) -> str:
    from jarvisd._config import Config
    from jarvisd._errors import SandboxError
    from jarvisd.sandbox import connect
    from jarvisd.sandbox._image import image_present

    if shutil.which("docker") is None:
        return "docker CLI not installed"
    try:
        client = connect(Config(), timeout=10)
    except SandboxError as exc:
        return f"no container engine reachable: {exc}"
    try:
        if not image_present(client, image):
            return f"image {image} missing (jarvis sandbox build)"
    finally:
        client.close()
    return ""


def run(env: BenchEnv) -> list[Row]:
    from jarvisd._config import Config
    from jarvisd._runcontext import RunContext
    from jarvisd.engines import ScriptedEngine
    from jarvisd.runs import AgentSpec, run_spec

    config = Config()
    image = config.sandbox.image
    problem = _problem(image)
    names = ("sandboxed simple run, p50", "sandboxed simple run, p95")
    if problem:
        return [
            Row(
                n,
                float("nan"),
                "s",
                baseline_name="docker run",
                target=f"<= {TARGET}x",
                passed=None,
                notes=f"skipped: {problem}",
            )
            for n in names
        ]
    runs = env.runs(20, 5)
    baseline_cmd = ["docker", "run", "--rm", "-i", "--network", "none", "--pull", "never",
                    image, "python3", "-c", "pass"]  # fmt: skip
    spec = AgentSpec(input="hello", agent="simple", isolation="sandbox")

    async def sandboxed() -> float:
        engine = ScriptedEngine.from_replies(["hi"])
        start = time.perf_counter()
        result = await run_spec(spec, RunContext(), config, engine)
        elapsed = time.perf_counter() - start
        assert result.answer == "hi", result.failure
        return elapsed

    def plain() -> float:
        start = time.perf_counter()
        subprocess.run(baseline_cmd, check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, env=dict(os.environ))  # fmt: skip
        return time.perf_counter() - start

    ours: list[float] = []
    base: list[float] = []

    async def measure() -> None:
        await sandboxed()  # warm-up: bytecode, engine connection, page cache
        plain()
        for _ in range(runs):
            ours.append(await sandboxed())
            base.append(await asyncio.to_thread(plain))

    asyncio.run(measure())
    rows = []
    for name, pct in zip(names, (50, 95), strict=True):
        a, b = percentile(ours, pct), percentile(base, pct)
        rows.append(
            Row(
                name,
                a,
                "s",
                baseline=b,
                baseline_name="plain docker run (CLI) of the same image",
                target=f"<= {TARGET}x",
                passed=a <= TARGET * b,
                notes=f"{runs} runs interleaved; hardened container + jarvis runner + "
                "proxied inference vs `docker run --rm python3 -c pass`",
            )
        )
    return rows
