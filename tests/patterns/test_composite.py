"""Composite step queues: completion and delegate steps, parallel groups with a timeout,
the callbacks, retry caps, skip and halt, keep_prompt, response_format."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import pytest

from jarvisd._errors import EngineError, PatternError
from jarvisd._events import EventType
from jarvisd._messages import Role
from jarvisd.agents import SimpleAgent
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.patterns import (
    AgentMember,
    Completion,
    Composite,
    Delegate,
    Steps,
    StepState,
)

from ._helpers import Recorder, engine_of, go, simple


@dataclasses.dataclass
class Verdict:
    ok: bool


class Review(Steps):
    """formulate -> [pedantic, acceptance] -> incorporate, as fnord's reviewer."""

    def __init__(self, *members: AgentMember, on_error: str = "halt") -> None:
        self.members = members
        self.log: list[str] = []
        self.decision = on_error

    def init(self, state: StepState) -> list[Any]:
        return [
            Completion("formulate", "Restate the change."),
            [Delegate.to(m.name, m, lambda s: f"review: {s.response}") for m in self.members],
            Completion("incorporate", "Write the review.", response_format=Verdict,
                       keep_prompt=True),
        ]  # fmt: skip

    def on_step_start(self, step: Any, state: StepState) -> None:
        self.log.append(f"start {step.name}")

    def on_step_complete(self, step: Any, state: StepState) -> None:
        self.log.append(f"done {step.name}")

    def on_error(self, step: Any, error: str, state: StepState) -> Any:
        self.log.append(f"error {step.name}: {error}")
        return self.decision


def test_a_queue_with_a_parallel_group() -> None:
    engine = ScriptedEngine.from_replies(["the change", '{"ok": true}'])
    pedantic, acceptance = simple("pedantic", "typo on line 3"), simple("acceptance", "meets it")
    steps = Review(pedantic, acceptance)
    rec = Recorder()
    result = go(Composite(engine, steps).arun("review this diff", run=rec.run()))
    assert result.output == Verdict(True) and result.content == '{"ok": true}'
    assert result.provenance.path == ("composite",)
    assert steps.log == ["start formulate", "done formulate", "start pedantic",
                         "start acceptance", "done pedantic", "done acceptance",
                         "start incorporate", "done incorporate"]  # fmt: skip
    assert engine_of(pedantic).calls[0].messages[-1].content == "review: the change"
    final = [(m.role, m.content) for m in engine.calls[1].messages]
    # formulate's prompt was dropped; delegate answers entered as "## label" user messages.
    assert final[:5] == [
        (Role.USER, "review this diff"),
        (Role.ASSISTANT, "the change"),
        (Role.USER, "## pedantic\ntypo on line 3"),
        (Role.USER, "## acceptance\nmeets it"),
        (Role.SYSTEM, "Write the review."),
    ]
    statuses = [(s["step"], s["status"]) for s in rec.of(EventType.STEP)]
    assert ("incorporate", "done") in statuses


def failing(name: str, times: int, then: str = "fine") -> AgentMember:
    """A member whose engine fails ``times`` times, then answers ``then``."""
    script: list[Any] = [*([EngineError("boom")] * times), reply(then)]
    return AgentMember(SimpleAgent(ScriptedEngine(script=script)), name)


def test_retry_reruns_only_the_failed_step_and_is_capped() -> None:
    engine = ScriptedEngine.from_replies(["c", '{"ok": false}'])
    flaky, steady = failing("flaky", 1), simple("steady", "ok")
    steps = Review(flaky, steady, on_error="retry")
    result = go(Composite(engine, steps, max_retries=1).arun("x"))
    assert result.output == Verdict(False)
    assert len(engine_of(steady).calls) == 1 and len(engine_of(flaky).calls) == 2
    # The failure was in the history, as fnord writes it, before the retry's answer.
    history = [m.content for m in engine.calls[1].messages]
    assert "## flaky\n**FAILED**: boom" in history and "## flaky\nfine" in history

    hopeless = Review(failing("flaky", 5), on_error="retry")
    with pytest.raises(PatternError, match="failed 2 times"):
        go(Composite(ScriptedEngine.from_replies(["c"]), hopeless, max_retries=1).arun("x"))


@pytest.mark.parametrize("decision", ["skip", "halt"])
def test_skip_and_halt(decision: Literal["skip", "halt"]) -> None:
    engine = ScriptedEngine.from_replies(["c", '{"ok": true}'])
    steps = Review(failing("flaky", 1), on_error=decision)
    if decision == "halt":
        with pytest.raises(PatternError, match="step 'flaky' failed: boom"):
            go(Composite(engine, steps).arun("x"))
        return
    assert go(Composite(engine, steps).arun("x")).output == Verdict(True)
    assert "error flaky: boom" in steps.log


def test_a_group_timeout_cancels_the_straggler() -> None:
    engine = ScriptedEngine.from_replies(["c", '{"ok": true}'])
    steps = Review(simple("slow", "late", latency=60), simple("fast", "ok"), on_error="skip")
    result = go(Composite(engine, steps, group_timeout=0.05).arun("x"))
    assert result.success
    assert any("slow: did not finish within 0.05 s" in line for line in steps.log)


def test_get_next_steps_and_response_format_loop() -> None:
    class Validate(Steps):
        def init(self, state: StepState) -> list[Any]:
            return [Completion("check", "Is it done?", response_format=Verdict)]

        def get_next_steps(self, step: Any, state: StepState) -> list[Any]:
            assert isinstance(state.output, Verdict)
            return [] if state.output.ok else [Completion("check", "Check again.",
                                                          response_format=Verdict)]  # fmt: skip

        def on_error(self, step: Any, error: str, state: StepState) -> Any:
            return "retry"

    engine = ScriptedEngine.from_replies(['{"ok": false}', "not json", '{"ok": true}'])
    result = go(Composite(engine, Validate()).arun("task"))
    assert result.output == Verdict(True) and result.metadata["steps"] == 3
    with pytest.raises(PatternError, match="more than 2 steps"):
        go(Composite(ScriptedEngine.from_replies(['{"ok": false}'] * 5), Validate(),
                     max_steps=2).arun("task"))  # fmt: skip
