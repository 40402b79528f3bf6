"""NativeReActAgent: Thought / Action / Action Input / Observation / Final Answer.

Markers are read case-insensitively. A model that answers with a JSON tool call instead
of ReAct lines (OpenJarvis issue #947) still gets its call run; a reply with neither an
action nor a final answer is re-prompted once, then reported as an error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from .._messages import Generation, ToolCall
from .._toolcalls import calls_end, recover_tool_calls
from ..tools import ToolDispatcher
from ._base import strip_think_tags
from ._parsing import parse_react, react_answer_so_far, react_call_end, tool_descriptions
from ._toolloop import Dialect, Step, ToolUsingAgent

__all__ = ["NativeReActAgent", "ReActDialect"]

REACT_PROMPT = """Answer the question using the tools below.

Tools:
{tools}

Use exactly this format:
Thought: what to do next
Action: the tool name, one of [{names}]
Action Input: the tool's arguments as a JSON object
Then stop and wait: the tool's result comes back as "Observation: ...".
Repeat Thought/Action/Action Input as needed. When you know the answer, write:
Thought: I know the answer
Final Answer: the answer

Example:
Thought: I need to compute 12*7.
Action: calculator
Action Input: {{"expression": "12*7"}}
Observation: 84
Thought: I know the answer
Final Answer: 84"""


class ReActDialect(Dialect):
    stop = ("\nObservation:",)
    # The first of Action and Final Answer wins: the answer streams from its marker on.
    answer_so_far = staticmethod(react_answer_so_far)

    def system_prompt(self, executor: ToolDispatcher) -> str | None:
        return REACT_PROMPT.format(
            tools=tool_descriptions(executor.specs), names=", ".join(executor.names)
        )

    def stop_when(self, executor: ToolDispatcher) -> Callable[[str], int | None]:
        names = executor.names

        def complete(text: str) -> int | None:
            # Action lines, or a JSON call written instead of them (read as parse does).
            end = react_call_end(text)
            if end is None and parse_react(text).final is None:
                end = calls_end(text, names)
            return end

        return complete

    def parse(self, generation: Generation, executor: ToolDispatcher) -> Step:
        content = strip_think_tags(generation.content)
        parsed = parse_react(content)
        if parsed.action is not None:
            call = ToolCall(
                name=executor.resolve(parsed.action) or parsed.action,
                arguments=parsed.action_input or "{}",
            )
            return Step("calls", parsed.kept, (call,))
        if parsed.final is not None:
            return Step("final", parsed.final)
        if generation.tool_calls:
            return Step("calls", content, generation.tool_calls)
        calls, _ = recover_tool_calls(content, executor.names)
        if calls:
            return Step("calls", content, tuple(calls), recovered=True)
        return Step(
            "invalid",
            error="it has neither an 'Action:' with 'Action Input:' nor a 'Final Answer:'",
        )

    def corrective(self, step: Step) -> str:
        return (
            f"Your last reply could not be used: {step.error}. Reply either with\n"
            "Action: <tool name>\nAction Input: <JSON arguments>\nor with\nFinal Answer: <answer>"
        )


class NativeReActAgent(ToolUsingAgent):
    """Thought / Action / Action Input / Final Answer loop with visible reasoning."""

    agent_id: ClassVar[str] = "native_react"

    def dialect(self) -> Dialect:
        return ReActDialect()
