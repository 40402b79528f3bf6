"""Scripted tests of the tool-using agents, directly and through the Ollama protocol
(an OllamaEngine talking HTTP to the stand-in): tool loop, max turns, calls recovered
from text, repeated calls blocked, unreadable output reported."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jarvisd._events import Event, EventBus, EventType
from jarvisd._messages import Message, Role, ToolCall, ToolSpec
from jarvisd._runcontext import Cancelled, RunContext
from jarvisd.agents import AgentContext, AgentRegistry
from jarvisd.agents._toolloop import LoopState, estimate_tokens, fit_messages
from jarvisd.engines import Engine, ScriptedEngine, reply
from jarvisd.executors import SubprocessExecutor
from jarvisd.tools import BaseTool, CalculatorTool, ThinkTool

from ._helpers import KINDS, engine_for


def make(key: str, engine: Engine, **kw: Any) -> Any:
    if key == "native_openhands":
        kw.setdefault("executor", SubprocessExecutor())
        kw.setdefault("allow_network", False)
    kw.setdefault("tools", [CalculatorTool(), ThinkTool()])
    return AgentRegistry.create(key, engine, "scripted" if key else "", temperature=0, **kw)


def arun(
    agent: Any, text: str, run: RunContext | None = None, context: AgentContext | None = None
) -> Any:
    async def go() -> Any:
        try:
            return await agent.arun(text, context, run=run)
        finally:
            if not isinstance(agent.engine, ScriptedEngine):
                await agent.engine.aclose()  # the HTTP client belongs to this event loop

    return asyncio.run(go())


# A tool call as each agent's model writes it, and a final answer.
CALL = {
    "orchestrator": lambda expr: reply("", ("calculator", {"expression": expr})),
    "native_react": lambda expr: reply(
        f'Thought: compute it\nAction: calculator\nAction Input: {{"expression": "{expr}"}}'
    ),
    "native_openhands": lambda expr: reply(f"```python\nprint({expr})\n```"),
}
FINAL = {
    "orchestrator": lambda text: reply(text),
    "native_react": lambda text: reply(f"Thought: done\nFinal Answer: {text}"),
    "native_openhands": lambda text: reply(f"Final Answer: {text}"),
}
AGENTS = list(CALL)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", AGENTS)
def test_tool_loop_runs_the_tool_and_returns_the_answer(key: str, kind: str) -> None:
    scripted = ScriptedEngine([CALL[key]("2**10 + 3**5"), FINAL[key]("1267")])
    with engine_for(kind, scripted) as engine:
        result = arun(make(key, engine), "What is 2^10 + 3^5?")
    assert result.content == "1267"
    assert result.turns == 2
    assert [r.content for r in result.tool_results] == ["1267"]
    assert "error" not in result.metadata
    # The second request carried the tool's result back to the model.
    assert "1267" in scripted.calls[1].messages[-1].content


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", AGENTS)
def test_max_turns(key: str, kind: str) -> None:
    scripted = ScriptedEngine([CALL[key](f"{i}+1") for i in range(3)])
    with engine_for(kind, scripted) as engine:
        result = arun(make(key, engine, max_turns=3), "count up from 0 by 1")
    assert result.turns == 3
    assert result.metadata["max_turns_exceeded"] is True
    assert len(result.tool_results) == 3


RECOVERED = {
    "fenced": '```json\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n```',
    "tagged": '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>',
    "bare": 'I will compute. {"name": "calculator", "arguments": {"expression": "6*7"}}',
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", AGENTS)
@pytest.mark.parametrize("style", list(RECOVERED))
def test_calls_written_as_text_are_recovered(key: str, kind: str, style: str) -> None:
    scripted = ScriptedEngine([reply(RECOVERED[style]), FINAL[key]("42")])
    with engine_for(kind, scripted) as engine:
        result = arun(make(key, engine), "6*7?")
    assert result.content == "42"
    assert [r.content for r in result.tool_results] == ["42"]
    assert result.metadata["recovered_calls"] == 1


@pytest.mark.parametrize("kind", KINDS)
def test_codeact_runs_tools_from_json_and_action_lines(kind: str) -> None:
    scripted = ScriptedEngine([
        reply('{"name": "calculator", "arguments": {"expression": "6*7"}}'),
        reply('action: Calculator\naction input: {"expression": "6*8"}'),
        # In a fence with no language: a tool call, not a program.
        reply('```\n{"name": "calculator", "arguments": {"expression": "6*9"}}\n```'),
        FINAL["native_openhands"]("42, 48 and 54"),
    ])  # fmt: skip
    with engine_for(kind, scripted) as engine:
        result = arun(make("native_openhands", engine), "go")
    assert [r.content for r in result.tool_results] == ["42", "48", "54"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", AGENTS)
def test_repeated_identical_calls_are_blocked_and_the_model_is_told(key: str, kind: str) -> None:
    scripted = ScriptedEngine([CALL[key]("1+1"), CALL[key]("1+1"), FINAL[key]("2")])
    with engine_for(kind, scripted) as engine:
        result = arun(make(key, engine, max_repeats=1), "1+1?")
    assert result.content == "2"
    assert [r.success for r in result.tool_results] == [True, False]
    assert result.metadata["blocked_calls"] == 1
    # The blocked call is answered in the history, then one turn without tools asks for
    # the answer (small local models otherwise repeat the call until max_turns).
    last = scripted.calls[2]
    blocked = result.tool_results[1]
    assert "Blocked" in blocked.content and "already called 1 times" in blocked.content
    # The answer turn says why, and shows the known results as plain text, without
    # call syntax.
    assert [m.role.value for m in last.messages] == ["user"] and last.tools == ()
    assert "Do not call any tool" in last.messages[0].content
    assert "was blocked and not run again" in last.messages[0].content
    shown = {"native_openhands": "python(code='print(1+1)') returned: 2"}.get(
        key, "calculator(expression='1+1') returned: 2"
    )
    assert shown in last.messages[0].content
    assert result.metadata["answer_turn"] is True


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", AGENTS)
def test_a_turn_that_learns_nothing_new_leads_to_the_answer_turn(key: str, kind: str) -> None:
    # The model feeds the result back into the tool: same result, no progress.
    scripted = ScriptedEngine([CALL[key]("6*7"), CALL[key]("42"), FINAL[key]("42")])
    with engine_for(kind, scripted) as engine:
        result = arun(make(key, engine), "6*7?")
    assert result.content == "42"
    assert [r.content for r in result.tool_results] == ["42", "42"]
    assert result.metadata["answer_turn"] is True and result.turns == 3
    assert scripted.calls[2].tools == ()


@pytest.mark.parametrize("key", AGENTS)
def test_an_empty_answer_after_the_tools_is_reported(key: str) -> None:
    scripted = ScriptedEngine([CALL[key]("6*7"), CALL[key]("42"), reply("  ")])
    result = arun(make(key, scripted), "6*7?")
    assert result.metadata["error"] == "empty answer" and result.content.startswith("Error:")
    assert "was blocked" not in scripted.calls[2].messages[0].content  # nothing was blocked


@pytest.mark.parametrize("key", AGENTS)
@pytest.mark.parametrize(
    "cut_off",
    [
        '{"name": "calculator", "arguments": {"expression": "6*',
        '```json\n{"name": "calculator", "argu',
        '<tool_call>{"name": "calc',
    ],
)
def test_a_call_cut_off_at_the_answer_turn_is_not_the_answer(key: str, cut_off: str) -> None:
    scripted = ScriptedEngine([CALL[key]("6*7"), CALL[key]("42"), reply(cut_off)])
    result = arun(make(key, scripted), "6*7?")
    assert result.metadata["answer_turn"] is True
    assert result.metadata["error"] == "the model did not answer (it wrote a tool call)"
    assert result.content.startswith("Error:")


def test_json_in_a_real_answer_is_still_an_answer() -> None:
    from jarvisd._toolcalls import starts_like_a_call

    assert not starts_like_a_call('The config is {"name": "x"}.')
    assert not starts_like_a_call('{"colors": ["red", "blue"]}')
    assert starts_like_a_call('  ```\n{ "function": {"name": "calculator"')


UNPARSEABLE = {
    "orchestrator": '{"name": "calculator", "arguments": {"expression": "1+1"',  # broken JSON
    "native_react": "I think the answer is 2.",
    "native_openhands": '{"name": "calculator", "arguments": {"expression": "1+1"',
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", AGENTS)
def test_unparseable_output_gets_one_reprompt_then_an_error(key: str, kind: str) -> None:
    scripted = ScriptedEngine([reply(UNPARSEABLE[key]), reply(UNPARSEABLE[key])])
    with engine_for(kind, scripted) as engine:
        result = arun(make(key, engine), "1+1?")
    assert result.turns == 2
    assert "unparseable model output" in result.metadata["error"]
    assert result.content.startswith("Error:")
    corrective = scripted.calls[1].messages[-1]
    assert corrective.role is Role.USER and "could not be used" in corrective.content


@pytest.mark.parametrize("key", AGENTS)
def test_one_reprompt_recovers(key: str) -> None:
    scripted = ScriptedEngine([reply(UNPARSEABLE[key]), FINAL[key]("2")])
    result = arun(make(key, scripted), "1+1?")
    assert result.content == "2" and "error" not in result.metadata


@pytest.mark.parametrize("kind", KINDS)
def test_codeact_takes_a_plain_reply_as_the_answer(kind: str) -> None:
    # OpenHands' CodeAct: a reply with no code is the message to the user.
    scripted = ScriptedEngine(
        [CALL["native_openhands"]("6*7"), reply("The answer is 42."), reply("The answer is 42.")]
    )
    with engine_for(kind, scripted) as engine:
        result = arun(make("native_openhands", engine), "6*7?")
    assert result.content == "The answer is 42."
    assert "error" not in result.metadata
    assert result.turns == 2 and len(scripted.calls) == 2


@pytest.mark.parametrize(
    "unusable", ["", "<think>only thinking</think>", '<tool_call>{"name": "calc']
)
def test_codeact_still_refuses_empty_replies_and_broken_calls(unusable: str) -> None:
    scripted = ScriptedEngine([reply(unusable), reply(unusable)])
    result = arun(make("native_openhands", scripted), "6*7?")
    assert "unparseable model output" in result.metadata["error"]
    assert result.content.startswith("Error:") and result.turns == 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "answer",
    [
        '{"name": "Alice"}',
        '{"name": "Alice", "age": 30}',
        'The user is {"name": "Alice"} and the tool is {"tool": "hammer"}.',
        '```json\n{"function": "greet", "name": "Bob"}\n```',
    ],
)
def test_orchestrator_returns_json_that_calls_no_offered_tool_as_the_answer(
    kind: str, answer: str
) -> None:
    scripted = ScriptedEngine([reply(answer), reply("a second turn is wrong")])
    with engine_for(kind, scripted) as engine:
        result = arun(make("orchestrator", engine), "Reply with the user as JSON.")
    assert result.content == answer
    assert "error" not in result.metadata and result.turns == 1


UNREADABLE = "it looks like a tool call but could not be read"
NOT_OFFERED = "there is no tool named 'web_search'; the tools are: calculator, think"


@pytest.mark.parametrize(
    ("attempt", "why"),
    [
        ('{"name": "calculater", "arguments": {"expression": "1+1"}}', UNREADABLE),  # a typo
        ('{"name": "CALCULATOR", "arguments": "not json"', UNREADABLE),  # another case, broken
        ('{"name": "calc', UNREADABLE),  # cut off inside the name
        ('{"name": "web_search", "arguments": {"q": "x"}}', NOT_OFFERED),  # a call, not offered
        # Small models call the functions of the prompt's example, more than once.
        ('{"name": "web_search", "arguments": {}}\n{"name": "web_search"}', NOT_OFFERED),
        ("<tool_call>calculator(1+1)</tool_call>", UNREADABLE),
    ],
)
def test_orchestrator_reprompts_replies_that_try_to_call_a_tool(attempt: str, why: str) -> None:
    scripted = ScriptedEngine([reply(attempt), reply("2")])
    result = arun(make("orchestrator", scripted), "1+1?")
    assert result.content == "2" and result.turns == 2
    corrective = scripted.calls[1].messages[-1]
    assert f"could not be used: {why}." in corrective.content


def test_react_markers_are_case_insensitive_and_hallucinated_observations_cut() -> None:
    scripted = ScriptedEngine([
        reply('THOUGHT: x\n**action:** CALCULATOR\nACTION INPUT: 6*7\nObservation: 41\nFinal Answer: 41'),
        reply("thought: ok\nFINAL ANSWER: 42"),
    ])  # fmt: skip
    result = arun(make("react", scripted), "6*7?")
    assert result.content == "42"
    assert result.tool_results[0].content == "42"
    kept = scripted.calls[1].messages[-2].content
    assert "41" not in kept and scripted.calls[0].options.stop == ("\nObservation:",)


def test_orchestrator_structured_mode() -> None:
    scripted = ScriptedEngine.from_replies(
        ['{"tool": "calculator", "arguments": {"expression": "3*3"}}', '{"final_answer": "9"}']
    )
    result = arun(make("orchestrator", scripted, mode="structured"), "3*3?")
    assert result.content == "9" and result.tool_results[0].content == "9"
    assert scripted.calls[0].tools == ()  # no native tools offered in structured mode


def test_parallel_calls_of_one_turn_each_get_a_result_in_order() -> None:
    calls = [ToolCall.from_arguments("calculator", {"expression": f"{i}*2"}) for i in range(3)]
    scripted = ScriptedEngine([reply("", *calls), reply("0, 2 and 4")])
    result = arun(make("orchestrator", scripted), "double 0, 1 and 2")
    assert [r.content for r in result.tool_results] == ["0", "2", "4"]
    tool_msgs = [m for m in scripted.calls[1].messages if m.role is Role.TOOL]
    assert [m.tool_call_id for m in tool_msgs] == [c.id for c in calls]


def test_checkpoint_after_each_turn_and_resume_continues() -> None:
    states: list[dict[str, Any]] = []
    scripted = ScriptedEngine([CALL["orchestrator"]("1+2"), CALL["orchestrator"]("3+4")])
    run = RunContext(checkpoint=lambda s: states.append(dict(s)))
    with pytest.raises(Exception, match="script exhausted"):
        arun(make("orchestrator", scripted), "sum 1+2 and 3+4", run)
    assert [s["turns"] for s in states] == [1, 2]
    last = states[-1]
    assert last["version"] == 1 and last["agent"] == "orchestrator"
    assert LoopState.from_dict(last).messages[-1].role is Role.TOOL
    # Resume: only the remaining turn is generated; no tool call is replayed.
    scripted2 = ScriptedEngine([reply("3 and 7")])
    result = arun(make("orchestrator", scripted2), "sum 1+2 and 3+4", RunContext(resume=last))
    assert result.content == "3 and 7" and result.turns == 3
    assert [r.content for r in result.tool_results] == ["3", "7"]
    assert len(scripted2.calls) == 1 and result.metadata["resumed"] is True


def test_cancellation_during_a_tool_leaves_no_call_without_a_result() -> None:
    from jarvisd._messages import ToolSpec
    from jarvisd.tools import BaseTool

    class Hang(BaseTool):
        spec = ToolSpec("hang", "never returns")  # type: ignore[assignment]

        async def execute(self, **params: object) -> str:
            await asyncio.sleep(60)
            return "never"

    states: list[dict[str, Any]] = []
    run = RunContext(checkpoint=lambda s: states.append(dict(s)))
    scripted = ScriptedEngine([reply("", ("hang", {}), ("calculator", {"expression": "1+1"}))])
    agent = make("orchestrator", scripted, tools=[Hang(), CalculatorTool()])

    async def go() -> None:
        asyncio.get_running_loop().call_later(0.2, run.cancel.cancel, "user stop")
        await agent.arun("what is 1+1?", run=run)

    with pytest.raises(Cancelled):
        asyncio.run(go())
    messages = [Message.from_dict(m) for m in states[-1]["messages"]]
    answered = {m.tool_call_id: m.content for m in messages if m.role is Role.TOOL}
    calls = messages[-3].tool_calls
    assert set(answered) == {c.id for c in calls}
    assert "Cancelled" in answered[calls[0].id] and answered[calls[1].id] == "2"


def test_budget_applies_to_the_loop() -> None:
    from jarvisd._runcontext import Budget, BudgetExceeded

    scripted = ScriptedEngine([CALL["orchestrator"](f"{i}") for i in range(5)])
    with pytest.raises(BudgetExceeded):
        arun(
            make("orchestrator", scripted), "0, 1, 2, 3, 4", RunContext(budget=Budget(max_calls=2))
        )
    assert len(scripted.calls) == 2


def test_history_is_fitted_to_the_engines_real_context_length() -> None:
    big = "word " * 3000  # ~5000 tokens by the estimate
    scripted = ScriptedEngine(
        [CALL["native_openhands"](f"'{i}' * 2000") for i in range(4)]
        + [FINAL["native_openhands"]("ok")],
        context_window=2048,
    )
    agent = make("native_openhands", scripted, max_tokens=256)
    result = arun(agent, "task " + big)
    assert result.content == "ok"
    for call in scripted.calls:
        assert sum(estimate_tokens(m) for m in call.messages) <= 2048 - 256
        assert call.messages[0].role is Role.SYSTEM
    last = scripted.calls[-1].messages
    assert any("left out to fit the context window" in m.content for m in last)
    assert any("cut to fit the context window" in m.content for m in last)


def test_fit_messages_keeps_turn_groups_whole() -> None:
    msgs = [Message.system("s"), Message.user("task")]
    for i in range(10):
        call = ToolCall("calculator", "{}", id=f"c{i}")
        msgs += [
            Message.assistant("", [call]),
            Message.tool("x" * 300, tool_call_id=f"c{i}", name="calculator"),
        ]
    fitted = fit_messages(msgs, 400)
    ids = [m.tool_call_id for m in fitted if m.role is Role.TOOL]
    call_ids = [c.id for m in fitted for c in m.tool_calls]
    assert ids == call_ids and ids[-1] == "c9" and len(ids) < 10


def test_codeact_code_runs_in_another_process_and_network_prefetch_is_off() -> None:
    import os

    # The answer drops the printed number: it is asked once more (and kept as it is).
    program = reply("```python\nimport os\nprint(os.getpid())\n```")
    scripted = ScriptedEngine([program, reply("Final Answer: done"), reply("done")])
    result = arun(make("native_openhands", scripted), "see http://example.invalid/page")
    assert result.tool_results[0].content.strip() != str(os.getpid())
    assert result.metadata["url_prefetch"].startswith("skipped")
    assert "Content of" not in scripted.calls[0].messages[-1].content


def test_codeact_timeout_is_reported() -> None:
    scripted = ScriptedEngine(
        [reply("```python\nwhile True: pass\n```"), reply("Final Answer: gave up")]
    )
    result = arun(make("native_openhands", scripted, exec_timeout=1), "spin")
    assert "timed out after 1 s" in result.tool_results[0].content
    assert "variables and imports from earlier cells are kept" in result.tool_results[0].content
    assert result.content == "gave up"


def test_simple_agent_refuses_tools_and_registry_knows_every_key() -> None:
    from jarvisd._errors import UsageError

    keys = AgentRegistry.keys()
    for key in ("simple", "orchestrator", "native_react", "react", "native_openhands", "rlm"):
        assert key in keys
    assert AgentRegistry.get("react") is AgentRegistry.get("native_react")
    with pytest.raises(UsageError):
        AgentRegistry.create("simple", ScriptedEngine(), tools=[CalculatorTool()])


@pytest.mark.parametrize("kind", KINDS)
def test_simple_agent_makes_one_call_and_strips_think_tags(kind: str) -> None:
    scripted = ScriptedEngine([reply("<think>the user wants a city</think>Paris.")])
    seen: list[EventType] = []
    bus = EventBus()
    bus.subscribe(lambda e: seen.append(e.type))
    context = AgentContext(conversation=[Message.user("Hi"), Message.assistant("Hello!")])
    with engine_for(kind, scripted) as engine:
        agent = AgentRegistry.create("simple", engine, "scripted", temperature=0,
                                     system_prompt="Be brief.")  # fmt: skip
        shown: list[str] = []
        run = RunContext(bus=bus, on_delta=shown.append)
        result = arun(agent, "Capital of France?", run, context)
    assert result.content == "Paris." and result.turns == 1 and result.tool_results == []
    assert "".join(shown) == "Paris."  # streamed, without the thinking
    assert result.usage.total_tokens > 0
    assert len(scripted.calls) == 1 and scripted.calls[0].tools == ()
    sent = [(m.role.value, m.content) for m in scripted.calls[0].messages]
    assert sent == [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"),
                    ("user", "Capital of France?")]  # fmt: skip
    assert seen[0] is EventType.AGENT_TURN_START and seen[-1] is EventType.AGENT_TURN_END
    assert EventType.INFERENCE_START in seen and EventType.INFERENCE_END in seen


class Nap(BaseTool):
    """An async tool that records how many of its calls overlap."""

    def __init__(self) -> None:
        self.active = 0
        self.most = 0

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec("nap", "sleeps a moment",
                        {"type": "object", "properties": {"n": {"type": "integer"}}})  # fmt: skip

    async def execute(self, **params: object) -> str:
        self.active += 1
        self.most = max(self.most, self.active)
        await asyncio.sleep(0.2)
        self.active -= 1
        return f"slept {params['n']}"


@pytest.mark.parametrize("kind", KINDS)
def test_orchestrator_runs_the_independent_calls_of_one_turn_concurrently(kind: str) -> None:
    calls = [ToolCall.from_arguments("nap", {"n": i}) for i in range(4)]
    scripted = ScriptedEngine([reply("", *calls), reply("done")])
    nap = Nap()
    with engine_for(kind, scripted) as engine:
        result = arun(make("orchestrator", engine, tools=[nap]), "nap four times")
    assert result.content == "done"
    assert [r.content for r in result.tool_results] == [f"slept {i}" for i in range(4)]
    assert nap.most == 4  # all four were running at once


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", AGENTS)
def test_a_subscriber_that_raises_never_breaks_a_run(
    key: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[EventType] = []

    def broken(event: Event) -> None:
        seen.append(event.type)
        raise RuntimeError("subscriber bug")

    bus = EventBus()
    bus.subscribe(broken)
    scripted = ScriptedEngine([CALL[key]("6*7"), FINAL[key]("42")])
    with engine_for(kind, scripted) as engine:
        result = arun(make(key, engine), "6*7?", RunContext(bus=bus))
    assert result.content == "42" and [r.content for r in result.tool_results] == ["42"]
    assert "error" not in result.metadata
    assert {
        EventType.AGENT_TURN_START, EventType.AGENT_TURN_END, EventType.TOOL_CALL_START,
        EventType.TOOL_CALL_END, EventType.INFERENCE_START, EventType.INFERENCE_END,
    } <= set(seen)  # fmt: skip
    assert "subscriber bug" in caplog.text


class NoSandbox(SubprocessExecutor):
    """A code executor whose container engine is not there."""

    name = "docker"

    async def open(self, request: Any) -> Any:
        from jarvisd._errors import SandboxUnavailable

        raise SandboxUnavailable("no container engine at the default Docker socket")


@pytest.mark.parametrize("key", ["native_openhands", "rlm"])
def test_an_unavailable_sandbox_ends_the_run_instead_of_being_fed_to_the_model(key: str) -> None:
    from jarvisd._errors import SandboxUnavailable

    scripted = ScriptedEngine([reply("```python\nprint(1)\n```")] * 3)
    extra: dict[str, Any] = {"allow_network": False} if key == "native_openhands" else {}
    agent = AgentRegistry.create(key, scripted, "scripted", executor=NoSandbox(), **extra)
    with pytest.raises(SandboxUnavailable, match="no container engine"):
        arun(agent, "print one", context=AgentContext(metadata={"context": "c"}))
    assert len(scripted.calls) == 1  # no second turn spent on an error the model cannot fix


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 100])
def test_streamed_text_leaves_out_think_blocks_split_across_chunks(size: int) -> None:
    from jarvisd.agents import strip_think_tags
    from jarvisd.agents._base import ThinkFilter

    text = "<THINK>plan: 2 < 3</think>\n\nThe answer is 2<3 and <b>bold</b>.<think>more"
    shown: list[str] = []
    stream = ThinkFilter(shown.append)
    for i in range(0, len(text), size):
        stream.feed(text[i : i + size])
    stream.flush()
    assert "".join(shown) == strip_think_tags(text) == "The answer is 2<3 and <b>bold</b>."


@pytest.mark.parametrize("agent", ["native_openhands", "rlm"])
def test_code_agents_take_executor_and_network_from_the_runs_config(
    agent: str, isolated_dirs: Any
) -> None:
    from pathlib import Path

    from jarvisd._config import Config, SandboxConfig, ToolsConfig
    from jarvisd.runs import AgentSpec, build_agent, run_spec

    # A broken file on disk must not matter: the run was given its config.
    (Path(isolated_dirs) / "config" / "config.toml").write_text("[sandbox]\nbackend = 7\n")
    config = Config(sandbox=SandboxConfig(backend="bwrap"), tools=ToolsConfig(allow_network=True))
    built = build_agent(AgentSpec(input="x", agent=agent), config, ScriptedEngine([]))
    assert built.code_executor.name == "bwrap"  # type: ignore[attr-defined]
    if agent == "native_openhands":
        assert built.allow_network is True  # type: ignore[attr-defined]

    none = Config(sandbox=SandboxConfig(backend="none"))
    engine = ScriptedEngine.from_replies(
        ["```python\nprint(6 * 7)\n```", "Final Answer: 42"]
        if agent == "native_openhands"
        else ["```repl\nFINAL(str(6 * 7))\n```"]
    )
    spec = AgentSpec(input="what is 6*7?", agent=agent)
    result = asyncio.run(run_spec(spec, RunContext(), none, engine))
    assert result.answer.strip() == "42", result


@pytest.mark.parametrize("agent", ["native_openhands", "rlm"])
def test_a_missing_sandbox_is_reported_before_any_model_turn(agent: str) -> None:
    from jarvisd._errors import SandboxUnavailable

    class NoSandbox(SubprocessExecutor):
        async def check(self) -> None:
            raise SandboxUnavailable("no container engine here")

    engine = ScriptedEngine.from_replies(["never asked"])
    built = AgentRegistry.create(agent, engine, "scripted", executor=NoSandbox())
    with pytest.raises(SandboxUnavailable, match="no container engine"):
        asyncio.run(built.arun("what is 6*7?", AgentContext(metadata={"context": "c"})))
    assert engine.calls == []


def test_the_answer_is_checkpointed_as_final_and_a_resume_ends_with_it() -> None:
    # A crash between the answer and the task's end resumes from the last checkpoint:
    # it must return that answer, not ask the model again with its own answer last.
    states: list[dict[str, Any]] = []
    scripted = ScriptedEngine([CALL["orchestrator"]("1+2"), reply("The sum is 3")])
    run = RunContext(checkpoint=lambda s: states.append(dict(s)))
    arun(make("orchestrator", scripted), "sum 1+2", run)
    assert states[-1]["final"]["content"] == "The sum is 3"
    # No state but the last holds the answer: every earlier one ends in a tool result.
    assert all(LoopState.from_dict(s).messages[-1].role is Role.TOOL for s in states[:-1])
    again = ScriptedEngine([])  # any model call would fail: the script is empty
    result = arun(make("orchestrator", again), "sum 1+2", RunContext(resume=states[-1]))
    assert result.content == "The sum is 3" and result.metadata["resumed"] is True
    assert again.calls == [] and [r.content for r in result.tool_results] == ["3"]
