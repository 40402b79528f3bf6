"""The turns without tools that ask for the answer: after a run made no progress or
held its calls (:func:`answer_turn`), and once more when an answer states none of the
numbers its tools returned (:func:`grounded`, :func:`drops_results`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._messages import Message, ToolResult
from .._runcontext import RunContext
from .._toolcalls import starts_like_a_call
from ..engines import RunEngine
from ..tools import ToolDispatcher
from ._answer import AnswerGate
from ._dialect import Dialect, LoopState

if TYPE_CHECKING:
    from ._toolloop import ToolUsingAgent

__all__ = ["BLOCKED_NOTE", "answer_turn", "drops_results", "grounded"]


ANSWER_NOW = (
    "{input}\n\nThese tool results are already known:\n{results}\n\n{why}"
    "Using these results, answer the request above in plain text. Do not call any tool."
)
#: The same without results (none succeeded, or a held call was the first).
ANSWER_PLAIN = "{input}\n\n{why}Answer the request above in plain text. Do not call any tool."
UNSTATED_NOTE = "Your answer did not state the values these tools returned: state them.\n\n"
BLOCKED_NOTE = (
    "Your last tool call repeated an earlier call with exactly the same arguments, so it "
    "was blocked and not run again: its result is listed above.\n\n"
)


def _known_results(state: LoopState, limit: int = 20, max_chars: int = 1000) -> str:
    """The run's distinct successful tool results as plain lines. Shown without any
    tool-call syntax, which small models would otherwise imitate instead of answering."""
    lines: list[str] = []
    for result in state.tool_results:
        if not result.success:
            continue
        arguments = result.metadata.get("arguments")
        pairs = arguments.items() if isinstance(arguments, Mapping) else ()
        args = ", ".join(f"{k}={v!r}" for k, v in pairs)
        line = f"- {result.tool_name}({args}) returned: {result.content[:max_chars]}"
        if line not in lines:
            lines.append(line)
    return "\n".join(lines[-limit:])


async def answer_turn(
    agent: ToolUsingAgent,
    run: RunContext,
    state: LoopState,
    dialect: Dialect,
    executor: ToolDispatcher,
    why: str = "",
    gate: AnswerGate | None = None,
) -> tuple[str, dict[str, Any]]:
    """One generation without tools on a flattened prompt (the request, the known
    results and ``why`` it is asked: a call was blocked, an answer left the results
    out); its text is the answer unless it is yet another call or empty."""
    if any(r.success for r in state.tool_results):
        text = ANSWER_NOW.format(input=state.input, results=_known_results(state), why=why)
    else:
        text = ANSWER_PLAIN.format(input=state.input, why=why)
    prompt = Message.user(text)
    if gate is None or not gate.streams:
        generation = await agent._generate(run, [prompt])
    else:
        engine = RunEngine.bind(agent.engine, run)
        generation = await gate.turn(
            engine.stream([prompt], model=agent.model, options=agent._options())
        )
    state.turns += 1
    state.usage = state.usage + generation.usage
    state.messages.extend([prompt, Message.assistant(generation.content)])
    step = dialect.parse(generation, executor)
    if step.kind == "calls":
        return (
            "Error: the model kept calling tools after it was asked to answer. "
            f"Last reply: {generation.content[:500]!r}",
            {"error": "the model did not stop calling tools", "answer_turn": True},
        )
    text = step.content if step.kind == "final" else agent.strip_think_tags(generation.content)
    if step.kind != "final" and starts_like_a_call(text):  # e.g. a call cut off mid-way
        return (
            "Error: the model wrote a tool call instead of the answer it was asked for. "
            f"Last reply: {generation.content[:500]!r}",
            {"error": "the model did not answer (it wrote a tool call)", "answer_turn": True},
        )
    if not text.strip():
        return (
            "Error: the model gave an empty answer after its tool calls.",
            {"error": "empty answer", "answer_turn": True},
        )
    return text, {"answer_turn": True}


#: A result that is one number, as the calculator and printed code return them.
_RESULT_NUMBER = re.compile(r"[-+]?(\d+(?:,\d{3})*(?:\.\d*)?|\.\d+)(?:[eE]([-+]?\d+))?")
#: A number in an answer: digits with thousands separators, decimals, an exponent.
_ANSWER_NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")
#: Results compared, the newest: bounds the check, as an answer names the last ones.
MAX_COMPARED_RESULTS = 32
#: A longer result is not a number an answer would state (a printed run of digits).
MAX_NUMBER_CHARS = 40


def _numeric_results(results: Sequence[ToolResult]) -> list[float]:
    """The absolute values of the successful results that are one number each (and the
    mantissa of one in scientific notation, which an answer may write as 1.5 x 10^20)."""
    values: list[float] = []
    for result in reversed(results):
        if not result.success or len(result.content) > MAX_NUMBER_CHARS + 8:
            continue
        text = result.content.strip()
        match = _RESULT_NUMBER.fullmatch(text) if len(text) <= MAX_NUMBER_CHARS else None
        if match is None:
            continue
        value = abs(float(match.group(0).replace(",", "")))
        if math.isfinite(value):
            values.append(value)
            if match.group(2) is not None:
                values.append(abs(float(match.group(1).replace(",", ""))))
        if len(values) >= MAX_COMPARED_RESULTS:
            break
    return values


def _states(number: str, values: Sequence[float]) -> bool:
    """Whether ``number``, as written in an answer, is one of ``values``: equal once
    normalised (1,234 is 1234, 42.0 is 42), or equal after rounding to the precision
    shown (15124 or 15123 for 15123.5, 3.14 for 3.14159), or as a percentage (12 for
    0.12, as in "12%")."""
    text = number.replace(",", "")
    value = float(text)
    mantissa = text.split("e")[0].split("E")[0]
    decimals = len(mantissa.partition(".")[2])
    for target in values:
        tolerance = max(0.5 * 10.0**-decimals, 1e-9 * target) * (1 + 1e-9)
        if abs(value - target) <= tolerance or abs(value / 100 - target) <= tolerance / 100:
            return True
    return False


def drops_results(answer: str, results: Sequence[ToolResult]) -> bool:
    """Whether ``answer`` leaves out every value the tools returned, so that asking
    again for the answer stating them may help.

    Conservative, so that a correct answer is never asked again: only results that are
    one number each count (the calculator's, printed code output); and the answer drops
    them only when it holds no number equal to any of them, compared after normalising
    (1,234 is 1234, 42.0 is 42) and rounding to the precision the answer shows. An
    answer that states any one result, even an intermediate one, is kept as it is.
    "This will return the result of 6*7" or "The result is ." drops 42. Linear in the
    length of the answer (at most :data:`MAX_COMPARED_RESULTS` results are compared);
    without results, nothing is read."""
    if not results:
        return False
    numbers = _ANSWER_NUMBER.findall(answer)
    if numbers:
        # The common case, cheaply: a result stated exactly as the tool wrote it.
        written = {r.content.strip() for r in results[-MAX_COMPARED_RESULTS:] if r.success}
        if not written.isdisjoint(numbers):
            return False
    values = _numeric_results(results)
    if not values:
        return False
    return not any(_states(number, values) for number in numbers)


async def grounded(
    agent: ToolUsingAgent,
    run: RunContext,
    state: LoopState,
    dialect: Dialect,
    executor: ToolDispatcher,
    gate: AnswerGate | None,
    answer: str,
) -> tuple[str, dict[str, Any]]:
    """``answer``, or, when it drops the tools' results (:func:`drops_results`), what
    the model answers when asked once more, stating them; with the metadata to add.

    The second answer is returned as the model wrote it, even if it still drops them;
    only when that turn gives no answer at all (a call, an empty reply) is the first
    answer kept. Never asked beyond the agent's ``max_turns``, nor when some of the answer has already gone out as final
    (ReAct and CodeAct stream from ``Final Answer:`` on): what was streamed must stay
    the run's answer, so those runs keep their answer rather than hold it back."""
    if state.turns >= agent.max_turns or (gate is not None and gate.sent):
        return answer, {}
    if not drops_results(answer, state.tool_results):
        return answer, {}
    text, meta = await answer_turn(agent, run, state, dialect, executor, UNSTATED_NOTE, gate)
    if "error" in meta:
        return answer, {"reasked": True}
    return text, {"reasked": True}
