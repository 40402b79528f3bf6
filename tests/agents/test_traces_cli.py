from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from jarvisd._config import Config, SandboxConfig
from jarvisd._errors import SandboxUnavailable
from jarvisd._runcontext import RunContext
from jarvisd.agents import AgentRegistry
from jarvisd.cli import cli
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.executors import SubprocessExecutor, executor_for
from jarvisd.tools import CalculatorTool
from jarvisd.traces import TraceCollector, TraceStore


def test_trace_collector_stores_a_run_and_the_cli_shows_it() -> None:
    run = RunContext()
    collector = TraceCollector().attach(run.bus)
    scripted = ScriptedEngine([reply("", ("calculator", {"expression": "2+2"})), reply("4")])
    agent = AgentRegistry.create("orchestrator", scripted, tools=[CalculatorTool()])
    asyncio.run(agent.arun("2+2?", run=run))
    assert len(collector.saved) == 1
    trace = TraceStore().get(collector.saved[0])
    assert trace.agent == "orchestrator" and trace.content == "4" and trace.tool_calls == 1
    kinds = [e["type"] for e in trace.events]
    assert (
        kinds[0] == "agent_turn_start"
        and "tool_call_end" in kinds
        and kinds[-1] == "agent_turn_end"
    )
    runner = CliRunner()
    listed = json.loads(runner.invoke(cli, ["trace", "list", "--json"]).output)
    assert listed[0]["id"] == trace.id
    shown = runner.invoke(cli, ["trace", "show", trace.id[:6]])
    assert shown.exit_code == 0 and "tool_call_start" in shown.output


def test_memory_and_tools_cli() -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["memory", "add", "The vault code is 991."]).exit_code == 0
    hits = json.loads(runner.invoke(cli, ["memory", "search", "vault code", "--json"]).output)
    assert hits[0]["text"] == "The vault code is 991."
    out = runner.invoke(cli, ["tools", "run", "calculator", '{"expression": "6*7"}'])
    assert out.exit_code == 0 and out.output.strip() == "42"
    bad = runner.invoke(cli, ["tools", "run", "calculator", '{"expression": "9**9**9"}'])
    assert bad.exit_code == 1 and "too large" in bad.output
    agents = json.loads(runner.invoke(cli, ["agents", "list", "--json"]).output)
    by_key = {a["key"]: a for a in agents}
    assert by_key["orchestrator"]["accepts_tools"] and not by_key["simple"]["accepts_tools"]


def test_executor_for_backends() -> None:
    assert isinstance(
        executor_for(Config(sandbox=SandboxConfig(backend="none"))), SubprocessExecutor
    )
    try:
        import jarvisd.sandbox as sandbox

        available = hasattr(sandbox, "executor_for_backend")
    except ImportError:
        available = False
    if not available:
        with pytest.raises(SandboxUnavailable, match="not available"):
            executor_for(Config(sandbox=SandboxConfig(backend="docker")))


def test_every_run_is_traced_even_when_it_fails() -> None:
    import asyncio

    from jarvisd import EngineResponseError
    from jarvisd._config import Config
    from jarvisd._runcontext import RunContext
    from jarvisd.engines import ScriptedEngine, reply
    from jarvisd.runs import AgentSpec, run_spec
    from jarvisd.traces import TraceStore

    spec = AgentSpec("hello", agent="simple")
    asyncio.run(run_spec(spec, RunContext(), Config(), ScriptedEngine([reply("hi")])))
    failing = ScriptedEngine([EngineResponseError("model exploded", 500)])
    outcome = asyncio.run(
        run_spec(AgentSpec("boom", agent="simple"), RunContext(), Config(), failing)
    )
    assert outcome.failure is not None and outcome.failure.code == "engine_response"
    store = TraceStore()
    traces = store.list()
    store.close()
    assert [t.input for t in traces] == ["boom", "hello"]
    assert traces[1].content == "hi" and not traces[1].error
    assert "model exploded" in traces[0].error


def test_a_sub_call_error_the_run_survives_does_not_mark_the_trace_failed() -> None:
    from collections.abc import Sequence

    from jarvisd import EngineResponseError
    from jarvisd._messages import Generation, Message, ToolSpec
    from jarvisd.agents import AgentContext

    root = [reply("```python\ntry:\n    llm_query('q')\nexcept Exception as e:\n    print(e)\n```"),
            reply("FINAL(done)")]  # fmt: skip

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if messages[0].role.value == "system":
            return root.pop(0)
        raise EngineResponseError("model exploded", 500)

    run = RunContext()
    collector = TraceCollector().attach(run.bus)
    agent = AgentRegistry.create(
        "rlm", ScriptedEngine(fallback=answer), executor=SubprocessExecutor()
    )
    result = asyncio.run(agent.arun("x", AgentContext(metadata={"context": "c"}), run=run))
    collector.detach(run.bus)
    assert result.content == "done" and "model exploded" in result.tool_results[0].content
    trace = TraceStore().get(collector.saved[0])
    assert trace.error == "" and trace.content == "done"
    ends = [e for e in trace.events if e["type"] == "inference_end"]
    assert any("model exploded" in str(e["data"].get("error")) for e in ends)


def test_trace_ids_match_by_prefix_only_never_by_wildcard() -> None:
    import time

    from jarvisd._errors import TaskNotFound
    from jarvisd.traces import Trace

    store = TraceStore()
    store.save(Trace("abc123", time.time()))
    store.save(Trace("abd456", time.time()))
    assert store.get("abc").id == "abc123"
    for pattern in ("ab_1", "a%", "_bc", "ab"):  # wildcards, or a prefix of both
        with pytest.raises(TaskNotFound, match="trace"):
            store.get(pattern)


def test_a_trace_keeps_its_events_within_byte_bounds() -> None:
    from jarvisd._events import EventType
    from jarvisd.traces import MAX_EVENT_BYTES, MAX_TRACE_BYTES

    run = RunContext()
    collector = TraceCollector().attach(run.bus)
    run.bus.publish(EventType.AGENT_TURN_START, agent="a", input="x", depth=0)
    run.bus.publish(EventType.TOOL_CALL_END, tool="t", content="b" * (4 * MAX_EVENT_BYTES))
    for _ in range(MAX_TRACE_BYTES // 20_000 + 10):
        run.bus.publish(EventType.TOOL_CALL_END, tool="t", content="s" * 20_000)
    run.bus.publish(EventType.AGENT_TURN_END, agent="a", content="done", turns=1, depth=0)
    trace = TraceStore().get(collector.saved[0])
    assert trace.events[1]["data"] == {
        "truncated": True,
        "bytes": pytest.approx(4 * MAX_EVENT_BYTES, rel=0.01),
    }
    assert len(json.dumps(trace.events)) < MAX_TRACE_BYTES + 1000
    assert trace.events[-1]["type"] == "events_dropped" and trace.events[-1]["data"]["count"] > 1
    assert trace.content == "done" and trace.tool_calls == MAX_TRACE_BYTES // 20_000 + 11


def test_an_event_nested_too_deeply_to_encode_is_kept_as_a_stub() -> None:
    from jarvisd._events import EventType

    deep: list[object] = []
    for _ in range(5000):
        deep = [deep]
    run = RunContext()
    collector = TraceCollector().attach(run.bus)
    run.bus.publish(EventType.AGENT_TURN_START, agent="a", input="x", depth=0)
    run.bus.publish(EventType.TOOL_CALL_START, tool="t", arguments={"a": deep})
    run.bus.publish(EventType.AGENT_TURN_END, agent="a", content="done", turns=1, depth=0)
    trace = TraceStore().get(collector.saved[0])
    assert trace.events[1]["type"] == "tool_call_start"
    assert trace.events[1]["data"]["truncated"] is True
