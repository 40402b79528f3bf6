"""Composition patterns: fan-out costs no more than the slowest member.

Rows:
- Parallel of 5 members on an engine with 0.2 s latency: wall time, beside one member
  alone on the same engine (target: under 0.3 s wall, i.e. the members overlap).
- A tool plan of 5 independent steps (0.1 to 0.3 s each): wall time of ``execute_plan``,
  beside its slowest step alone (target: within 1.2 times it; one wave, run at once).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks.harness import BenchEnv, Row, median

LATENCY = 0.2
STEPS = (0.1, 0.15, 0.2, 0.25, 0.3)


async def _parallel_once() -> tuple[float, float]:
    from jarvisd._runcontext import RunContext
    from jarvisd.agents import SimpleAgent
    from jarvisd.engines import ScriptedEngine, reply
    from jarvisd.patterns import AgentMember, Parallel

    def member(name: str) -> AgentMember:
        engine = ScriptedEngine(fallback=reply("ok"), latency_s=LATENCY)
        return AgentMember(SimpleAgent(engine), name)

    alone = member("alone")
    start = time.perf_counter()
    await alone.arun("q", run=RunContext())
    single = time.perf_counter() - start
    pattern = Parallel([member(f"m{i}") for i in range(5)])
    start = time.perf_counter()
    result = await pattern.arun("q", run=RunContext())
    wall = time.perf_counter() - start
    assert result.success and len(result.members) == 5
    return wall, single


async def _plan_once() -> tuple[float, float]:
    from jarvisd._messages import ToolSpec
    from jarvisd._runcontext import RunContext
    from jarvisd.patterns import ToolPlan, execute_plan
    from jarvisd.tools import BaseTool, ToolDispatcher

    class Sleep(BaseTool):
        @property
        def spec(self) -> ToolSpec:
            return ToolSpec("sleep", "waits", {"type": "object",
                            "properties": {"s": {"type": "number"}}})  # fmt: skip

        async def execute(self, **params: Any) -> str:
            await asyncio.sleep(float(params["s"]))
            return "done"

    executor = ToolDispatcher([Sleep()])
    slowest = ToolPlan.from_json({"steps": [{"id": "s", "tool": "sleep",
                                             "arguments": {"s": max(STEPS)}}]})  # fmt: skip
    start = time.perf_counter()
    await execute_plan(slowest, executor, RunContext())
    single = time.perf_counter() - start
    steps = [{"id": f"s{i}", "tool": "sleep", "arguments": {"s": s}} for i, s in enumerate(STEPS)]
    plan = ToolPlan.from_json({"steps": steps})
    start = time.perf_counter()
    results = await execute_plan(plan, executor, RunContext())
    wall = time.perf_counter() - start
    assert all(r.success for r in results.values())
    return wall, single


def run(env: BenchEnv) -> list[Row]:
    rounds = env.runs(5, 2)
    parallel = [asyncio.run(_parallel_once()) for _ in range(rounds)]
    plans = [asyncio.run(_plan_once()) for _ in range(rounds)]
    wall, single = median([p[0] for p in parallel]), median([p[1] for p in parallel])
    plan_wall, slowest = median([p[0] for p in plans]), median([p[1] for p in plans])
    return [
        Row("Parallel, 5 members x 0.2 s engine", wall, "s", single, "one member alone",
            "< 0.3 s wall", wall < 0.3, "Parallel(mode='all'), scripted engine latency 0.2 s"),
        Row("tool plan, 5 independent steps (0.1-0.3 s)", plan_wall, "s", slowest,
            "its slowest step alone", "<= 1.2x slowest step", plan_wall <= 1.2 * slowest,
            "execute_plan: one wave, calls run at once"),
    ]  # fmt: skip
