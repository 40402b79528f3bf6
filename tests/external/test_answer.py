"""Only the agent's answer is the run's answer (issue 30, item 4): not its narration
before a tool call, not codex's "Model metadata ... not found" notice (not even
streamed), not the ``<system-reminder>`` text opencode's prompt makes a small model
echo. The rest streams to the user as it comes."""

from __future__ import annotations

from pathlib import Path

from jarvisd.external._mapping import TextDelta, ToolEnded, ToolStarted

from .conftest import make_client

NOTICE = (
    "Model metadata for `qwen2.5-coder-1.5b` not found. Defaulting to fallback metadata; "
    "this can degrade performance and cause issues."
)


def test_the_answer_is_what_follows_the_last_tool_call(workspace: Path) -> None:
    client, _, _, deltas = make_client(workspace)
    for item in (
        TextDelta(NOTICE), TextDelta("Let me read the file."),
        ToolStarted("c1", "read", "read", {}), ToolEnded("c1", "read", True, "x"),
        TextDelta("<system-reminder>Running read tool with arguments {}</system-reminder>"),
        TextDelta("The project prints hello."),
    ):  # fmt: skip
        client._apply(item)
    assert client.answer_text() == "The project prints hello."
    streamed = "".join(deltas)  # the user saw everything live, but the agent's notice
    assert streamed.startswith("Let me read the file.") and NOTICE not in streamed


def test_a_notice_glued_onto_an_answer_without_tool_calls_is_cut(workspace: Path) -> None:
    client, _, _, _ = make_client(workspace)
    client._apply(TextDelta(NOTICE + "The project is a tiny demo."))
    assert client.answer_text() == "The project is a tiny demo."
