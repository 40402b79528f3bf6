"""OrchestratorAgent: the function-calling loop (default) or a structured JSON mode for
models without native tool calling. Calls written into the text (fenced JSON,
``<tool_call>`` tags, bare JSON) are recovered; a reply that tries to call an offered
tool but cannot be read is re-prompted once, never mistaken for the answer, while other
JSON in a reply is an answer like any text."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .._errors import UsageError
from .._messages import Generation, Message, Role, ToolCall, ToolResult
from .._toolcalls import calls_end, extract_json_objects, recover_tool_calls
from ..tools import ToolDispatcher
from ._base import strip_think_tags
from ._parsing import tool_descriptions
from ._toolloop import Dialect, Step, ToolUsingAgent

if TYPE_CHECKING:
    from ..catalog import ToolPrompt

__all__ = ["FunctionCallingDialect", "OrchestratorAgent", "StructuredDialect"]

_new = object.__new__
_TAG = re.compile(r"<tool_call>", re.IGNORECASE)
# A name key and its string value, read from text that may be broken or cut-off JSON
# (the value's closing quote may be missing).
_NAMED = re.compile(r'"(?:name|tool|tool_name|function)"\s*:\s*"([^"\n]*)', re.IGNORECASE)
_ARGUMENTS = re.compile(r'"(?:arguments|parameters)"\s*:', re.IGNORECASE)


def _near(value: str, names: Collection[str]) -> bool:
    """Whether ``value`` names one of ``names`` or nearly does: another case, a typo,
    or the start of a name cut off mid-way."""
    value = value.strip().lower()
    if not value:
        return False
    lowered = [n.lower() for n in names]
    if value in lowered or (len(value) >= 3 and any(n.startswith(value) for n in lowered)):
        return True
    return bool(difflib.get_close_matches(value, lowered, n=1, cutoff=0.8))


def _unread_call(content: str, names: Collection[str]) -> str | None:
    """Why a reply from which no call could be read is still not the answer, or None
    when it is one. It tries to call a tool with a ``<tool_call>`` tag, a name key whose
    value names an offered tool (or nearly does), or a name key with arguments beside
    it; other JSON, such as ``{"name": "Alice"}``, is an answer. Small models call
    functions that exist only in their training data or in a prompt's example
    ("multiply", "calculate_revenue"): the reason names them and the offered tools."""
    tagged = _TAG.search(content) is not None
    if not tagged and "{" not in content:
        return None
    values = _NAMED.findall(content)
    if not (
        tagged or any(_near(v, names) for v in values) or (values and _ARGUMENTS.search(content))
    ):
        return None
    unknown = [v for v in dict.fromkeys(values) if v and not _near(v, names)]
    if unknown:
        offered = ", ".join(names) or "none"
        missing = ", ".join(repr(v[:60]) for v in unknown[:3])  # the model's text: bounded
        return f"there is no tool named {missing}; the tools are: {offered}"
    return "it looks like a tool call but could not be read"


FUNCTION_PROMPT = (
    "You are a helpful assistant with tools. When a tool helps, call it; when you have "
    "the answer, reply with the answer in plain text. To call a tool, use the function "
    'calling format, or write {"name": "<tool>", "arguments": {...}}.'
)


class FunctionCallingDialect(Dialect):
    offers_tools: ClassVar[bool] = True

    def __init__(self, prompt: ToolPrompt | None = None) -> None:
        self.prompt = prompt  # the model family's (see catalog), else the generic one

    def system_prompt(self, executor: ToolDispatcher) -> str | None:
        if self.prompt is None:
            return FUNCTION_PROMPT + "\nTools:\n" + tool_descriptions(executor.specs)
        if self.prompt.template_lists_tools:
            return self.prompt.system
        return self.prompt.system + "\nTools:\n" + tool_descriptions(executor.specs)

    def stop_when(self, executor: ToolDispatcher) -> Callable[[str], int | None]:
        names = executor.names
        return lambda text: calls_end(text, names)

    def parse(self, generation: Generation, executor: ToolDispatcher) -> Step:
        content = generation.content
        # strip_think_tags(content), whose usual case is written out: once a turn.
        content = content.strip() if "<" not in content else strip_think_tags(content)
        if generation.tool_calls:
            # Step("calls", content, generation.tool_calls), without the dataclass's
            # __init__: once a turn.
            step = _new(Step)
            step.kind, step.content, step.calls = "calls", content, generation.tool_calls
            step.error, step.recovered = "", False
            return step
        calls, rest = recover_tool_calls(content, executor.names)
        if calls:
            return Step("calls", rest, tuple(calls), recovered=True)
        why = _unread_call(content, executor.names)
        if why is not None:
            return Step("invalid", error=why)
        if not content:
            return Step("invalid", error="the reply was empty")
        return Step("final", content)

    def assistant_message(self, generation: Generation, step: Step) -> Message:
        # Message.assistant(step.content, step.calls), written out: once a turn.
        calls = step.calls if type(step.calls) is tuple else tuple(step.calls)
        message = _new(Message)
        message.role, message.content, message.tool_calls = Role.ASSISTANT, step.content, calls
        message.tool_call_id = message.name = None
        return message

    def result_messages(self, step: Step, results: Sequence[ToolResult]) -> list[Message]:
        if len(results) == 1:  # the usual turn: Message.tool, written out
            r = results[0]
            message = _new(Message)
            message.role, message.content, message.tool_calls = Role.TOOL, r.content, ()
            message.tool_call_id, message.name = r.call_id, r.tool_name
            return [message]
        return [Message.tool(r.content, tool_call_id=r.call_id, name=r.tool_name) for r in results]

    def corrective(self, step: Step) -> str:
        return (
            f"Your last reply could not be used: {step.error}. To call a tool, reply with "
            'exactly {"name": "<tool name>", "arguments": {...}} using one of the listed '
            "tools; otherwise reply with the final answer in plain text."
        )


STRUCTURED_PROMPT = """You solve tasks with tools. Reply with ONE JSON object and nothing else:
- to call a tool: {{"tool": "<tool name>", "arguments": {{...}}}}
- to finish: {{"final_answer": "<your answer>"}}
Tools:
{tools}"""


class StructuredDialect(Dialect):
    def system_prompt(self, executor: ToolDispatcher) -> str | None:
        return STRUCTURED_PROMPT.format(tools=tool_descriptions(executor.specs))

    def parse(self, generation: Generation, executor: ToolDispatcher) -> Step:
        content = strip_think_tags(generation.content)
        if generation.tool_calls:
            return Step("calls", content, generation.tool_calls)
        for _, _, value in extract_json_objects(content):
            if not isinstance(value, dict):
                continue
            if "final_answer" in value:
                return Step("final", str(value["final_answer"]))
            name = value.get("tool") or value.get("name")
            if isinstance(name, str):
                args = value.get("arguments", value.get("parameters", {}))
                return Step("calls", content, (ToolCall.from_arguments(name, _args(args)),))
        return Step("invalid", error='no JSON object with "tool" or "final_answer" was found')

    def corrective(self, step: Step) -> str:
        return (
            f"Your last reply could not be used: {step.error}. Reply with one JSON object: "
            '{"tool": "<name>", "arguments": {...}} or {"final_answer": "..."}.'
        )


def _args(value: object) -> dict[str, object] | str:
    if isinstance(value, dict | str):
        return value
    return {}


class OrchestratorAgent(ToolUsingAgent):
    """Multi-turn tool calling; independent calls of one turn run concurrently.

    ``hold_ungrounded`` (on by default): a call whose values the conversation never gave
    (a team, a date, a number the model made up), or that passes a name to a tool that
    shares no word with the request, is not run; the model is asked once, without
    tools, to answer instead, or to ask for what it needs."""

    agent_id: ClassVar[str] = "orchestrator"

    def __init__(
        self,
        *args: Any,
        mode: Literal["function_calling", "structured"] = "function_calling",
        hold_ungrounded: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.hold_ungrounded = hold_ungrounded
        if mode not in ("function_calling", "structured"):
            raise UsageError(
                f"orchestrator mode must be 'function_calling' or 'structured', not {mode!r}"
            )
        self.mode = mode

    def dialect(self) -> Dialect:
        dialect: Dialect
        if self.mode != "function_calling":
            dialect = StructuredDialect()
        else:
            from ..catalog import tool_prompt

            model = self.model or self.engine.default_model()
            dialect = FunctionCallingDialect(tool_prompt(model))
        dialect.holds_ungrounded = self.hold_ungrounded
        return dialect
