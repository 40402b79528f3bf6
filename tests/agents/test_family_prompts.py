"""Per-family tool prompts: the catalog entry says how its family is best asked to call
tools, and the orchestrator's tool loop uses it for that model."""

from __future__ import annotations

import asyncio

from jarvisd.agents import AgentRegistry
from jarvisd.catalog import CATALOG, get_entry, tool_prompt
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.tools import CalculatorTool


def system_prompt(model: str) -> str:
    engine = ScriptedEngine([reply("4")])
    agent = AgentRegistry.create("orchestrator", engine, model, tools=[CalculatorTool()])
    asyncio.run(agent.arun("2+2?"))
    return engine.calls[0].messages[0].content


def test_qwen_models_get_their_family_prompt_by_name_or_file() -> None:
    entry = get_entry("qwen2.5-coder-0.5b")
    assert entry.tool_prompt is not None and tool_prompt(entry.name) is entry.tool_prompt
    assert tool_prompt(f"/models/{entry.filename}") is entry.tool_prompt
    prompt = system_prompt(f"/models/{entry.filename}")
    assert prompt.startswith(entry.tool_prompt.system)
    # Its chat template lists the tools: the prompt does not list them again.
    assert "- calculator:" not in prompt
    assert "do not call any" in prompt


def test_other_models_get_the_generic_prompt_with_the_tools() -> None:
    assert tool_prompt("scripted") is None
    prompt = system_prompt("scripted")
    assert "- calculator:" in prompt and "<tool_call>" not in prompt


def test_every_tool_template_model_has_a_family_prompt() -> None:
    for entry in CATALOG:
        assert (entry.tool_prompt is not None) == entry.tool_template, entry.name
