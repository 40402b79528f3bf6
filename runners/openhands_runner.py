"""The openhands runner: an OpenHands agent (openhands-sdk) in its own Python >= 3.12
virtual environment, driven over frame protocol v1 on stdin/stdout.

Started by the host (``jarvisd.external._openhands``) as the venv's Python with jarvis's
source directory on ``sys.path``; it imports only the stdlib part of jarvis (the frame
codec). It reads one ``start`` frame (task ``openhands``) whose payload says what to do:

    task, workspace, model, base_url, api_key, max_iterations, system_prompt,
    request_timeout, tools_url

Its LLM is the host's inference gateway (OpenAI dialect at ``base_url``): no other
network. When the run has tools of jarvis's, ``tools_url`` is the same gateway's MCP
endpoint, handed to the SDK as one HTTP MCP server (``jarvis``, the run's token as
the Bearer header): the host runs each call on the run's ledger. Each action the agent
takes with its own tools and each observation are ``event`` frames (tool_call_start /
tool_call_end; for jarvis's tools the host publishes them itself); the end is one
``result`` frame (``answer``, ``turns``, ``tool_results``) or one ``error`` frame.
Everything the SDK prints goes to stderr, so stdout carries frames only.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Mapping
from typing import Any

from jarvisd.protocol import (
    ChildLink,
    ErrorFrame,
    EventFrame,
    Frame,
    FrameReader,
    ResultFrame,
    Start,
)

#: Characters of a tool observation sent to the host in one event or result.
_MAX_OBSERVATION = 4000
#: Seconds one model request may take when the host does not say (it always does).
_REQUEST_TIMEOUT_S = 3600


def _text_of(value: Any) -> str:
    text = getattr(value, "text", None)
    if isinstance(text, str):
        return text
    content = getattr(value, "content", None)
    if isinstance(content, list):
        return "\n".join(_text_of(c) for c in content)
    return str(value)


def make_llm(payload: Mapping[str, Any]) -> Any:
    """The SDK's LLM on the host's gateway.

    Its per-request limit is the host's ``request_timeout`` (the runner's own backstop):
    the host bounds the run (budgets, wall clock, cancel), and a small model on a few
    busy cores can take more than ten minutes to read OpenHands's ~6,400-token first
    prompt. ``timeout=None`` would not do: litellm then falls back to 600 s.
    """
    from openhands.sdk import LLM
    from pydantic import SecretStr

    return LLM(
        model="openai/" + str(payload["model"]),
        base_url=str(payload["base_url"]),
        api_key=SecretStr(str(payload["api_key"])),
        usage_id="jarvis",
        num_retries=0,  # the gateway is local: a failure is not a blip worth a retry
        timeout=int(payload.get("request_timeout") or _REQUEST_TIMEOUT_S),
        drop_params=True,
    )


def mcp_config(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The SDK's ``mcp_config``: the host gateway's MCP endpoint, when it serves tools."""
    url = payload.get("tools_url")
    if not url:
        return {}
    headers = {"Authorization": f"Bearer {payload['api_key']}"}
    return {"jarvis": {"url": str(url), "transport": "http", "headers": headers}}


def run(start: Start, out: ChildLink) -> Frame:
    payload: Mapping[str, Any] = start.payload
    from openhands.sdk import Agent, Conversation, Tool
    from openhands.sdk.conversation.response_utils import get_agent_final_response
    from openhands.sdk.event import ActionEvent, ObservationEvent
    from openhands.sdk.mcp import MCPToolAction, MCPToolObservation
    from openhands.tools.file_editor import FileEditorTool
    from openhands.tools.terminal import TerminalTool

    agent = Agent(
        llm=make_llm(payload),
        tools=[Tool(name=TerminalTool.name), Tool(name=FileEditorTool.name)],
        mcp_config=mcp_config(payload),
    )
    results: list[dict[str, Any]] = []
    pending: dict[str, str] = {}

    def on_event(event: Any) -> None:
        # A call of jarvis's tools ran on the host's ledger, which published its events.
        ours = isinstance(getattr(event, "action", None), MCPToolAction) or isinstance(
            getattr(event, "observation", None), MCPToolObservation
        )
        if isinstance(event, ActionEvent):
            call_id = str(event.tool_call_id)
            pending[call_id] = event.tool_name
            if ours:
                return
            arguments = event.action.model_dump(mode="json") if event.action is not None else {}
            out.send(EventFrame(type="tool_call_start",
                                data={"tool": event.tool_name, "call_id": call_id, "arguments": arguments}))  # fmt: skip
        elif isinstance(event, ObservationEvent):
            call_id = str(event.tool_call_id)
            text = _text_of(event.observation)[:_MAX_OBSERVATION]
            failed = bool(getattr(event.observation, "is_error", False))
            results.append({"tool_name": event.tool_name, "content": text, "success": not failed,
                            "call_id": call_id})  # fmt: skip
            if ours:
                return
            out.send(EventFrame(type="tool_call_end",
                                data={"tool": event.tool_name, "call_id": call_id,
                                      "success": not failed, "content": text}))  # fmt: skip

    conversation = Conversation(
        agent=agent,
        workspace=str(payload["workspace"]),
        callbacks=[on_event],
        max_iteration_per_run=int(payload.get("max_iterations") or 10),
        visualizer=None,
        stuck_detection=True,
    )
    try:
        task = str(payload["task"])
        if payload.get("system_prompt"):
            task = f"{payload['system_prompt']}\n\n{task}"
        conversation.send_message(task)
        conversation.run()
        answer = get_agent_final_response(conversation.state.events)
        status = str(getattr(conversation.state, "execution_status", ""))
    finally:
        conversation.close()
    return ResultFrame(
        id=start.id,
        result={
            "answer": answer,
            "status": status.rsplit(".", 1)[-1].lower(),
            "turns": len(results),
            "tool_results": results,
        },
    )


def entry() -> None:
    # Frames to the real stdout, whatever else the SDK prints (only sent: the host
    # sends nothing after the start frame).
    out = ChildLink(FrameReader(sys.stdin.buffer), sys.stdout.buffer)
    sys.stdout = sys.stderr  # the SDK's prints and banners are noise: keep them apart
    start = out.reader.read()
    if not isinstance(start, Start) or start.task != "openhands":
        out.send(ErrorFrame(code="protocol", message="expected a start frame for task openhands"))
        return
    try:
        out.send(run(start, out))
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        out.send(
            ErrorFrame(id=start.id, code="agent", message=f"{type(exc).__name__}: {exc}"[:2000])
        )
    finally:
        sys.stderr.flush()
    os._exit(0)  # the SDK leaves non-daemon threads (terminal sessions) behind


if __name__ == "__main__":
    entry()
