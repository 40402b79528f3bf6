"""How each model family is best asked to call tools, kept with its catalog entries.

A model calls tools best in the format its chat template was trained on: Qwen2.5's
template lists the offered functions itself and asks for ``<tool_call>`` tags, so its
prompt neither lists the tools again (a longer prompt only slows a small model down)
nor asks for another format. What the template leaves out, and small models get wrong,
goes in the prompt: call nothing when no function fits, one call per thing asked,
only the values the user gave, and an answer that states the results.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["QWEN25_TOOLS", "ToolPrompt"]


@dataclass(frozen=True, slots=True)
class ToolPrompt:
    """The tool loop's system prompt for one model family."""

    system: str
    #: Whether the chat template shows the offered tools itself (then the prompt does
    #: not list them again).
    template_lists_tools: bool = False


QWEN25_TOOLS = ToolPrompt(
    system=(
        "You are a helpful assistant with functions. Call a function only when it does "
        "exactly what the user asks and the user's message gives the values it needs: "
        "then reply with only the calls, each in <tool_call></tool_call> tags, with the "
        "values the user gave (leave out optional arguments the user did not give). When "
        "the user asks for several things, make one call for each. When the functions do "
        "something else, even something related, or the user did not give the values a "
        "function needs, do not call any: answer in plain text. Once you have the "
        "results, answer in plain text, stating them.\n\n"
        "Example, with functions multiply and get_weather:\n"
        "User: What is 3 times 4, and the weather in Paris?\n"
        "Assistant:\n"
        '<tool_call>\n{"name": "multiply", "arguments": {"a": 3, "b": 4}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    ),
    template_lists_tools=True,
)
