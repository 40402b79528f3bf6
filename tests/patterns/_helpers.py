"""Helpers for pattern tests: members on scripted engines, and an event recorder."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from jarvisd._events import Event, EventBus, EventType
from jarvisd._runcontext import RunContext
from jarvisd.agents import OrchestratorAgent, SimpleAgent
from jarvisd.engines import ScriptedEngine
from jarvisd.engines._scripted import Script
from jarvisd.patterns import AgentMember
from jarvisd.tools import BaseTool

T = TypeVar("T")


def simple(name: str, *replies: str, latency: float = 0.0) -> AgentMember:
    """A one-call agent named ``name`` answering ``replies`` in order."""
    engine = ScriptedEngine.from_replies(replies, latency_s=latency)
    return AgentMember(SimpleAgent(engine, temperature=0.0), name)


def engine_of(member: AgentMember) -> ScriptedEngine:
    engine = member.agent.engine
    assert isinstance(engine, ScriptedEngine)
    return engine


def tool_agent(script: list[Script], tools: list[BaseTool] | None = None) -> OrchestratorAgent:
    return OrchestratorAgent(ScriptedEngine(script=script), tools=tools or [], temperature=0.0)


class Recorder:
    """Every event of a run's bus, in order."""

    def __init__(self) -> None:
        self.bus = EventBus()
        self.events: list[Event] = []
        self.bus.subscribe(self.events.append)

    def run(self, **kw: Any) -> RunContext:
        return RunContext(bus=self.bus, **kw)

    def of(self, kind: EventType) -> list[dict[str, Any]]:
        return [dict(e.data) for e in self.events if e.type is kind]


def go(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)
