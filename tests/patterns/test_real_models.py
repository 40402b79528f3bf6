"""Patterns on a real local model (Qwen2.5-Coder, llama.cpp, temperature 0).

Small models' words are not asserted: these tests assert the structure (a route number
was read and that member answered; the critic reviewed and the actor's draft came
back; a plan was read, checked and its steps ran with their outputs chained).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from jarvisd._events import EventType
from jarvisd.agents import SimpleAgent
from jarvisd.patterns import AgentMember, PlanAndExecute, Reflective, Router
from tests.conftest import real_model_path

from ._helpers import Recorder

pytestmark = pytest.mark.model


def engine(model: str) -> Any:
    from jarvisd.engines import LlamaCppEngine

    return LlamaCppEngine(str(real_model_path(model)), n_ctx=4096)


def agent(llm: Any, name: str, prompt: str, max_tokens: int = 160) -> AgentMember:
    return AgentMember(
        SimpleAgent(llm, temperature=0.0, max_tokens=max_tokens, system_prompt=prompt), name
    )


def run(llm: Any, coro: Coroutine[Any, Any, Any]) -> Any:
    async def go() -> Any:
        try:
            return await coro
        finally:
            await llm.aclose()

    return asyncio.run(go())


def test_router_reads_the_number_and_runs_that_member() -> None:
    llm = engine("qwen2.5-coder-1.5b")
    math = agent(llm, "math", "You solve arithmetic. Answer with the number.", 32)
    poet = agent(llm, "poet", "You write short poems.", 32)
    router = Router(llm, [(poet, "writes poems"), (math, "does arithmetic and calculations")])
    rec = Recorder()
    result = run(llm, router.arun("Calculate 17 * 3.", run=rec.run()))
    (chosen,) = rec.of(EventType.ROUTE_CHOSEN)
    assert chosen["fallback"] is False and chosen["choice"] in (1, 2), chosen
    assert result.provenance.path == ("router", chosen["member"]), result.provenance
    assert chosen["member"] == "math", chosen
    assert result.success and result.content, result


def test_reflective_critic_reviews_and_the_actor_answers() -> None:
    llm = engine("qwen2.5-coder-0.5b")
    actor = agent(llm, "writer", "You write one short, correct sentence.", 80)
    critic = agent(llm, "critic", "You review answers strictly but briefly.", 80)
    rec = Recorder()
    result = run(
        llm,
        Reflective(actor, critic, max_rounds=2).arun(
            "Write one sentence saying what the capital of France is.", run=rec.run()
        ),
    )
    assert result.success and result.content, result
    assert result.provenance.path == ("reflective", "writer")
    rounds = [r["round"] for r in rec.of(EventType.ROUND)]
    assert rounds and rounds == list(range(1, len(rounds) + 1))
    producers = [m.provenance.producer for m in result.members]
    assert producers[:2] == ["writer", "critic"], producers
    assert isinstance(result.metadata["approved"], bool)


def test_plan_and_execute_plans_and_chains_the_steps() -> None:
    llm = engine("qwen2.5-coder-1.5b")
    researcher = agent(llm, "researcher", "You list facts, briefly.", 120)
    writer = agent(llm, "writer", "You turn notes into one clear paragraph.", 160)
    pattern = PlanAndExecute(
        llm, [researcher, writer], max_replans=1,
        descriptions={"researcher": "finds facts", "writer": "writes the final text"},
    )  # fmt: skip
    rec = Recorder()
    result = run(
        llm, pattern.arun("List two facts about the Moon, then write them as a paragraph.",
                          run=rec.run()),
    )  # fmt: skip
    assert result.success and result.content, result
    steps = rec.of(EventType.STEP)
    done = [s for s in steps if s["status"] == "done"]
    assert done, steps
    assert result.provenance.path[0] == "plan_and_execute"
    assert result.provenance.producer in ("researcher", "writer")
    assert result.metadata["steps"] == len(done)
    planner = result.members[0]
    assert planner.provenance.producer == "plan_and_execute.planner"
