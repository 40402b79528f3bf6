"""Streaming of the tool agents' final answers (``run.on_delta``) through the answer
gate: what goes out, joined, is the run's answer; call turns and errors send nothing;
ReAct and CodeAct answers go out while they are generated."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from jarvisd._events import EventBus, EventType
from jarvisd._messages import Generation, Message, SamplingOptions, StreamChunk, ToolSpec
from jarvisd._runcontext import RunContext
from jarvisd.agents import AgentContext, AgentRegistry
from jarvisd.agents._base import ThinkFilter
from jarvisd.agents._parsing import final_before_code_so_far, react_answer_so_far
from jarvisd.engines import Engine, ScriptedEngine, reply
from jarvisd.engines._base import DEFAULT_OPTIONS
from jarvisd.executors import SubprocessExecutor
from jarvisd.tools import CalculatorTool, ThinkTool

from ._helpers import KINDS, engine_for

ANSWER = "The sum is 1267, computed with the calculator."

# A tool call as each agent's model writes it, and a final answer.
CALL = {
    "orchestrator": reply("", ("calculator", {"expression": "2**10 + 3**5"})),
    "native_react": reply(
        'Thought: compute it\nAction: calculator\nAction Input: {"expression": "2**10 + 3**5"}'
    ),
    "native_openhands": reply("I will compute it.\n```python\nprint(2**10 + 3**5)\n```"),
    "rlm": reply("```python\nprint(2**10 + 3**5)\n```"),
}
FINAL = {
    "orchestrator": reply(ANSWER),
    "native_react": reply(f"Thought: I know it\nFinal Answer: {ANSWER}"),
    "native_openhands": reply(f"Final Answer: {ANSWER}"),
    "rlm": reply(f"```python\nFINAL({ANSWER!r})\n```"),
}
# Another call, so that a run makes two tool turns before its answer.
CALL2 = {
    "orchestrator": reply("", ("calculator", {"expression": "1+1"})),
    "native_react": reply('Action: calculator\nAction Input: {"expression": "1+1"}'),
    "native_openhands": reply("```python\nprint(1+1)\n```"),
    "rlm": reply("```python\nprint(1+1)\n```"),
}
AGENTS = list(CALL)
#: Dialects whose parser commits to a final answer before the reply ends: their answer
#: goes out while it is generated; the others' goes out once the reply is read.
COMMITS_EARLY = ("native_react", "native_openhands")


class Recorder:
    """The deltas a run streams, in order with the run's events."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []
        self.bus = EventBus()
        self.bus.subscribe(lambda e: self.log.append(("event", e.type)))

    def run(self) -> RunContext:
        return RunContext(bus=self.bus, on_delta=lambda text: self.log.append(("delta", text)))

    @property
    def deltas(self) -> list[str]:
        return [text for kind, text in self.log if kind == "delta"]

    def events(self, type: EventType) -> list[int]:
        return [i for i, (kind, value) in enumerate(self.log) if value is type]


def make(key: str, engine: Engine, **kw: Any) -> Any:
    if key in ("native_openhands", "rlm"):
        kw.setdefault("executor", SubprocessExecutor())
    if key == "native_openhands":
        kw.setdefault("allow_network", False)
    kw.setdefault("tools", [CalculatorTool(), ThinkTool()])
    return AgentRegistry.create(key, engine, "scripted", temperature=0, **kw)


def arun(agent: Any, text: str, run: RunContext) -> Any:
    context = AgentContext(metadata={"context": "x" * 100}) if agent.agent_id == "rlm" else None

    async def go() -> Any:
        try:
            return await agent.arun(text, context, run=run)
        finally:
            if not isinstance(agent.engine, ScriptedEngine):
                await agent.engine.aclose()  # the HTTP client belongs to this event loop

    return asyncio.run(go())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", AGENTS)
def test_the_streamed_text_is_the_answer_after_tool_turns(key: str, kind: str) -> None:
    recorder = Recorder()
    scripted = ScriptedEngine([CALL[key], CALL2[key], FINAL[key]])
    with engine_for(kind, scripted) as engine:
        result = arun(make(key, engine), "What is 2^10 + 3^5?", recorder.run())
    assert result.content == ANSWER and "error" not in result.metadata
    assert "".join(recorder.deltas) == result.content
    # Nothing went out before the last turn began: the call turns streamed nothing.
    last_turn = recorder.events(EventType.INFERENCE_START)[-1]
    assert all(i > last_turn for i, (kind_, _) in enumerate(recorder.log) if kind_ == "delta")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", COMMITS_EARLY)
def test_react_and_codeact_answers_stream_while_they_are_generated(key: str, kind: str) -> None:
    recorder = Recorder()
    scripted = ScriptedEngine([CALL[key], FINAL[key]])
    with engine_for(kind, scripted) as engine:
        result = arun(make(key, engine), "What is 2^10 + 3^5?", recorder.run())
    assert result.content == ANSWER
    assert len(recorder.deltas) > 3 and "".join(recorder.deltas) == ANSWER
    # The first piece went out before the final turn's generation ended.
    first = next(i for i, (kind_, _) in enumerate(recorder.log) if kind_ == "delta")
    assert first < recorder.events(EventType.INFERENCE_END)[-1]


@pytest.mark.parametrize("key", ["orchestrator", "rlm"])
def test_other_dialects_send_their_answer_once_the_reply_is_read(key: str) -> None:
    recorder = Recorder()
    result = arun(make(key, ScriptedEngine([CALL[key], FINAL[key]])), "sum?", recorder.run())
    assert recorder.deltas == [result.content] == [ANSWER]


CALL_TURNS = {
    "orchestrator": [
        # Prose first, then a call: the prose must not go out as answer text.
        'I will compute it now. {"name": "calculator", "arguments": {"expression": "6*7"}}',
        'Let me see.\n```json\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n```',
        'Sure thing.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}'
        "\n</tool_call>",
    ],
    "native_react": [
        'Thought: compute\nAction: calculator\nAction Input: {"expression": "6*7"}',
        # An Action before a Final Answer wins: the answer it guessed must not go out.
        'Action: calculator\nAction Input: {"expression": "6*7"}\nFinal Answer: 41 or so',
        '{"name": "calculator", "arguments": {"expression": "6*7"}}',
    ],
    "native_openhands": [
        "Let me compute this value.\n```python\nprint(6*7)\n```",
        'Action: calculator\nAction Input: {"expression": "6*7"}\nFinal Answer: 41 or so',
        "<think>\nFinal Answer: nope\n</think>\n```python\nprint(6*7)\n```",
    ],
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("key", "call"), [(k, c) for k, cs in CALL_TURNS.items() for c in cs])
def test_a_call_turn_streams_nothing(key: str, call: str, kind: str) -> None:
    recorder = Recorder()
    final = "42" if key == "orchestrator" else "Final Answer: 42"
    scripted = ScriptedEngine([reply(call), reply(final)])
    with engine_for(kind, scripted) as engine:
        result = arun(make(key, engine), "6*7?", recorder.run())
    assert result.tool_results and result.tool_results[0].content == "42"
    assert result.content == "42" and recorder.deltas == ["42"]


UNPARSEABLE = {
    "orchestrator": '{"name": "calculator", "arguments": {"expression": "1+1"',  # broken JSON
    # An answer after an invented observation is no answer: it must not go out.
    "native_react": "Observation: 2\nFinal Answer: 2, no need for any tool at all.",
    "rlm": "The answer is probably 2, I would say.",
}


@pytest.mark.parametrize("key", list(UNPARSEABLE))
def test_an_unusable_reply_twice_streams_nothing(key: str) -> None:
    recorder = Recorder()
    scripted = ScriptedEngine([reply(UNPARSEABLE[key]), reply(UNPARSEABLE[key])])
    result = arun(make(key, scripted), "1+1?", recorder.run())
    assert "unparseable model output" in result.metadata["error"]
    assert recorder.deltas == []


@pytest.mark.parametrize("key", ["orchestrator", "native_react", "native_openhands"])
def test_the_answer_turn_streams_its_answer(key: str) -> None:
    # The same call twice: the second is blocked, and one turn without tools answers.
    recorder = Recorder()
    answer = {"orchestrator": ANSWER}.get(key, f"Final Answer: {ANSWER}")
    scripted = ScriptedEngine([CALL[key], CALL[key], reply(answer)])
    result = arun(make(key, scripted), "What is 2^10 + 3^5?", recorder.run())
    assert result.metadata.get("answer_turn") and result.content == ANSWER
    assert "".join(recorder.deltas) == ANSWER


@pytest.mark.parametrize("key", ["orchestrator", "native_react"])
def test_an_answer_turn_that_calls_again_streams_nothing(key: str) -> None:
    recorder = Recorder()
    scripted = ScriptedEngine([CALL[key], CALL[key], CALL[key]])
    result = arun(make(key, scripted), "What is 2^10 + 3^5?", recorder.run())
    assert result.metadata["error"] and recorder.deltas == []


def test_think_blocks_and_react_markers_split_across_pieces_never_go_out() -> None:
    text = (
        "<think>\nFinal Answer: wrong\n</think>\nThought: ok\n**Final Answer:** Paris,\n"
        "the capital.\nObservation: invented"
    )
    for size in (1, 2, 3, 5, 8):
        recorder = Recorder()
        engine = ChunkedEngine(text, size)
        result = arun(make("native_react", engine), "capital?", recorder.run())
        assert result.content == "Paris,\nthe capital."
        assert len(recorder.deltas) > 1 and "".join(recorder.deltas) == result.content, size


def test_runs_without_on_delta_and_turns_that_cannot_stream_take_the_plain_call() -> None:
    engine = ChunkedEngine("Final Answer: 42", 4, streams=False)
    assert arun(make("native_react", engine), "?", RunContext()).content == "42"
    recorder = Recorder()
    engine = ChunkedEngine("42 it is", 4, streams=False)
    result = arun(make("orchestrator", engine), "?", recorder.run())
    assert result.content == "42 it is" and recorder.deltas == ["42 it is"]


REPLIES = [
    "Thought: x\nFinal Answer: Paris is nice.\nThought: done",
    "Final Answer:\n  Thoughtful answer\n\nAction items:\n- one\nAction: calculator",
    "**Final Answer**: *Paris*\n> Thought experiment\nObservation: 1",
    "Action:\nFinal Answer: 42\nAction Input: {}",
    "Thought: hmm\nAction: calculator\nFinal Answer: 41",
    "Final answer: here:\n```python\nprint(1)\n```\nThought\n: cut",
]


@pytest.mark.parametrize("text", REPLIES)
def test_what_is_committed_of_a_reply_is_a_prefix_of_its_answer(text: str) -> None:
    from jarvisd._messages import Generation
    from jarvisd.agents._codeact import CodeActDialect
    from jarvisd.agents._react import ReActDialect
    from jarvisd.tools import ToolDispatcher

    executor = ToolDispatcher([CalculatorTool()])
    for dialect, so_far in (
        (ReActDialect(), react_answer_so_far),
        (CodeActDialect(), final_before_code_so_far),
    ):
        step = dialect.parse(Generation(content=text), executor)
        seen: list[str] = []
        shown = ThinkFilter(seen.append)
        for char in text:
            shown.feed(char)
            committed = so_far("".join(seen))
            if committed is not None:
                assert step.kind == "final" and step.content.startswith(committed), committed
        if step.kind == "final":
            assert so_far("".join(seen)) == step.content


class ChunkedEngine(Engine):
    """Answers ``text`` in pieces of ``size`` characters; with ``streams=False``, a
    stream() call fails the test (the run must take the plain path)."""

    def __init__(self, text: str, size: int, *, streams: bool = True) -> None:
        self.text, self.size, self.streams = text, size, streams

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        return reply(self.text)

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        assert self.streams, "a run without on_delta streamed"
        for i in range(0, len(self.text), self.size):
            yield StreamChunk(delta=self.text[i : i + self.size])
        yield StreamChunk(done=True, generation=reply(self.text))


def test_codeact_final_answer_before_code_is_the_answer_with_its_code() -> None:
    # The code after "Final Answer:" is part of the answer (the function asked for),
    # not a program to run: the streamed answer and the result agree.
    text = "Final Answer: here it is:\n```python\ndef add(a, b):\n    return a + b\n```"
    recorder = Recorder()
    result = arun(make("native_openhands", ScriptedEngine([reply(text)])), "add?", recorder.run())
    assert result.tool_results == []
    assert result.content == text.removeprefix("Final Answer: ")
    assert len(recorder.deltas) > 1 and "".join(recorder.deltas) == result.content


def generated_reply(rng: Any) -> str:
    """A reply of a few lines, dense in what the readers react to: markers with and
    without decoration and colons, code fences, think tags, JSON calls."""
    lines = []
    for _ in range(rng.randint(1, 5)):
        decor = rng.choice(["", "*", "**", "# ", "> ", " "])
        head = rng.choice([
            "Thought", "Final Answer", "final answer", "Action", "Action Input", "Observation",
            "Paris", "The", "```python", "```", "print(1)", "<think>", "</think>",
            '{"name": "calculator", "arguments": {}}',
        ])  # fmt: skip
        colon = rng.choice(["", ":", ": ", " :", "**: ", "\n:"])
        body = rng.choice(["", "x", "calculator", "42 is it", "```python\nprint(2)\n```", "none"])
        lines.append(decor + head + colon + body)
    return "".join(line + rng.choice(["\n", "\n\n", " "]) for line in lines)


def test_committed_text_is_a_prefix_of_the_answer_for_many_generated_replies() -> None:
    import random

    from jarvisd.agents._codeact import CodeActDialect
    from jarvisd.agents._react import ReActDialect
    from jarvisd.tools import ToolDispatcher

    executor = ToolDispatcher([CalculatorTool()])
    rng = random.Random(10)
    committed = 0
    for _ in range(1500):
        text = generated_reply(rng)
        for dialect, so_far in (
            (ReActDialect(), react_answer_so_far),
            (CodeActDialect(), final_before_code_so_far),
        ):
            step = dialect.parse(Generation(content=text), executor)
            seen: list[str] = []
            shown = ThinkFilter(seen.append)
            for char in text:
                shown.feed(char)
                answer = so_far("".join(seen))
                if answer:
                    committed += 1
                    assert step.kind == "final" and step.content.startswith(answer), text
    assert committed > 1000  # the replies exercised the committed path
