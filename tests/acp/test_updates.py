"""A run's events as ACP updates: tool calls with their kind, status and output, a
pattern's members as tool calls, plan steps as plans, text bounded."""

from __future__ import annotations

from jarvisd._events import Event, EventType
from jarvisd.acp._updates import UpdateMapper


def dumped(mapper: UpdateMapper, kind: EventType, **data: object) -> list[dict[str, object]]:
    return [
        u.model_dump(mode="json", by_alias=True, exclude_none=True)
        for u in mapper.map(Event(kind, data))
    ]


def test_tool_calls_members_and_plans() -> None:
    m = UpdateMapper("s-1")
    (start,) = dumped(
        m, EventType.TOOL_CALL_START, tool="file_read", arguments={"path": "/a"}, call_id="c1"
    )
    assert start == {"sessionUpdate": "tool_call", "toolCallId": "s-1-1", "title": "file_read",
                     "kind": "read", "status": "in_progress", "rawInput": {"path": "/a"}}  # fmt: skip
    assert m.started_id("file_read", "c1") == "s-1-1"
    (end,) = dumped(
        m,
        EventType.TOOL_CALL_END,
        tool="file_read",
        call_id="c1",
        success=False,
        content="x" * 9000,
    )
    assert (end["toolCallId"], end["status"]) == ("s-1-1", "failed")
    assert len(end["content"][0]["content"]["text"]) < 4100  # clipped
    assert dumped(m, EventType.TOOL_CALL_END, tool="file_read", call_id="c1", success=True) == []

    (member,) = dumped(m, EventType.MEMBER_START, pattern="router", member="coder", depth=1)
    assert (member["title"], member["sessionUpdate"]) == ("router: coder", "tool_call")
    (done,) = dumped(
        m,
        EventType.MEMBER_END,
        pattern="router",
        member="coder",
        success=True,
        content="ok",
        error="",
    )
    assert (done["toolCallId"], done["status"]) == (member["toolCallId"], "completed")

    (plan,) = dumped(
        m, EventType.STEP, pattern="plan", step="research", status="start", detail="search"
    )
    assert plan["entries"] == [
        {"content": "research: search", "priority": "medium", "status": "in_progress"}
    ]
    (plan,) = dumped(m, EventType.STEP, pattern="plan", step="research", status="done", detail="")
    (plan,) = dumped(m, EventType.STEP, pattern="plan", step="write", status="start", detail="")
    assert [(e["content"], e["status"]) for e in plan["entries"]] == [
        ("research: search", "completed"), ("write", "in_progress")]  # fmt: skip
    (plan,) = dumped(
        m, EventType.AGENT_PLAN, entries=[["pending", "a"], ["completed", "b"], "junk"]
    )
    assert [(e["content"], e["status"]) for e in plan["entries"]] == [
        ("a", "pending"),
        ("b", "completed"),
    ]
    assert dumped(m, EventType.INFERENCE_START) == []
