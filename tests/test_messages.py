from __future__ import annotations

from jarvisd import FinishReason, Generation, Message, Role, ToolCall, Usage
from jarvisd._toolcalls import recover_tool_calls


def test_message_round_trip() -> None:
    call = ToolCall.from_arguments("calculator", {"expression": "1+1"})
    messages = [
        Message.system("s"),
        Message.user("u"),
        Message.assistant("", [call]),
        Message.tool("2", tool_call_id=call.id, name="calculator"),
    ]
    assert [Message.from_dict(m.to_dict()) for m in messages] == messages
    assert messages[3].role is Role.TOOL


def test_generation_round_trip() -> None:
    g = Generation(
        "hi", (ToolCall("t", '{"a": 1}', "call_1"),), Usage(3, 4), FinishReason.TOOL_CALLS, "m"
    )
    assert Generation.from_dict(g.to_dict()) == g
    assert g.usage.total_tokens == 7


def test_arguments_are_kept_raw() -> None:
    call = ToolCall("calc", '{"expression": "2+2",}')  # invalid JSON survives for repair
    assert call.arguments.endswith(",}")
    assert call.arguments_dict() == {}


NAMES = ["calculator", "think"]


def test_recover_tagged_call() -> None:
    text = 'Sure.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>'
    calls, rest = recover_tool_calls(text, NAMES)
    assert [(c.name, c.arguments_dict()) for c in calls] == [("calculator", {"expression": "6*7"})]
    assert rest == "Sure."


def test_recover_fenced_and_bare_calls() -> None:
    fenced = '```json\n{"name": "Calculator", "parameters": {"expression": "1+2"}}\n```'
    calls, _ = recover_tool_calls(fenced, NAMES)
    assert calls[0].name == "calculator" and calls[0].arguments_dict() == {"expression": "1+2"}
    bare = 'I will call {"name": "think", "arguments": {"thought": "x"}} now'
    calls, rest = recover_tool_calls(bare, NAMES)
    assert calls[0].name == "think" and rest == "I will call  now"


def test_unknown_names_and_plain_json_are_not_calls() -> None:
    text = 'The config is {"name": "rm_rf", "arguments": {}} and {"a": 1}'
    assert recover_tool_calls(text, NAMES) == ([], text)
