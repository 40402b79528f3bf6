"""Hypothesis: whatever an agent sends (session/update payloads, permission requests,
file paths, raw messages), the client neither crashes nor hangs, and refuses clearly."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jarvisd._errors import ProtocolError, ToolError
from jarvisd._runcontext import RunContext
from jarvisd.external import AcpClient, PermissionPolicy, Workspace, map_update
from jarvisd.external._mapping import MAX_EVENT_CHARS
from jarvisd.external._transport import check_message

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
KINDS = ["agent_message_chunk", "tool_call", "tool_call_update", "plan", "agent_thought_chunk",
         "user_message_chunk", "available_commands_update", "current_mode_update", "nonsense"]  # fmt: skip

updates = st.fixed_dictionaries(
    {"sessionUpdate": st.sampled_from(KINDS)},
    optional={
        "content": st.one_of(
            json_values,
            st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=9000)}),
            st.lists(st.fixed_dictionaries({"type": st.just("content"), "content": st.fixed_dictionaries(
                {"type": st.just("text"), "text": st.text(max_size=9000)})}), max_size=3),
        ),
        "toolCallId": json_values,
        "title": json_values,
        "kind": st.sampled_from(["read", "edit", "execute", "bogus"]) | json_values,
        "status": st.sampled_from(["pending", "in_progress", "completed", "failed"]) | json_values,
        "rawInput": json_values,
        "rawOutput": json_values,
        "entries": st.lists(st.fixed_dictionaries({
            "content": st.text(max_size=600), "priority": st.sampled_from(["high", "low"]),
            "status": st.sampled_from(["pending", "completed"])}), max_size=3) | json_values,
    },
)  # fmt: skip


def _client(tmp_path: Path) -> tuple[AcpClient, RunContext, list[Any]]:
    events: list[Any] = []
    run = RunContext(on_delta=lambda text: None)
    run.bus.subscribe(events.append)
    client = AcpClient(run, Workspace(tmp_path), agent="fuzz")
    client.session_id = "s"
    return client, run, events


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(payload=updates)
def test_any_session_update_maps_without_crashing(tmp_path: Path, payload: dict[str, Any]) -> None:
    from acp.schema import SessionNotification
    from pydantic import ValidationError

    try:
        note = SessionNotification.model_validate({"sessionId": "s", "update": payload})
    except ValidationError:
        return  # the SDK answers invalid params: nothing reaches the client
    for item in map_update(note.update):
        for value in vars(item).values() if hasattr(item, "__dict__") else ():
            assert len(str(value)) < 10 * MAX_EVENT_CHARS
    client, _, events = _client(tmp_path)
    asyncio.run(asyncio.wait_for(client.session_update("s", note.update), 5))
    for event in events:
        assert len(json.dumps(event.data, default=str)) < 20 * MAX_EVENT_CHARS


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from(["read", "edit", "execute", "fetch", "other", "bogus"]) | st.none(),
    options=st.lists(st.fixed_dictionaries({
        "optionId": st.text(max_size=20),
        "name": st.text(max_size=20),
        "kind": st.sampled_from(["allow_once", "allow_always", "reject_once", "reject_always"]),
    }), max_size=4),
    rules=st.dictionaries(st.sampled_from(["default", "read", "edit", "execute"]),
                          st.sampled_from(["allow", "deny", "ask"])),
)  # fmt: skip
def test_any_permission_request_gets_a_valid_answer(
    tmp_path: Path, kind: str | None, options: list[dict[str, str]], rules: dict[str, str]
) -> None:
    from acp.schema import RequestPermissionRequest, RequestPermissionResponse
    from pydantic import ValidationError

    call = {"toolCallId": "t", "title": "x"}
    if kind is not None:
        call["kind"] = kind
    try:
        request = RequestPermissionRequest.model_validate(
            {"sessionId": "s", "toolCall": call, "options": options}
        )
    except ValidationError:
        return
    client, _, _ = _client(tmp_path)
    client.policy = PermissionPolicy.from_mapping(rules)
    answer = asyncio.run(
        asyncio.wait_for(client.request_permission("s", request.tool_call, request.options), 5)
    )
    RequestPermissionResponse.model_validate(answer.model_dump(by_alias=True))
    decision = client.policy.decide(request.tool_call.kind)
    if answer.outcome.outcome == "selected":
        # Every option with that id means what was decided (ids may repeat).
        chosen = [o for o in request.options if o.option_id == answer.outcome.option_id]
        assert chosen
        assert all(o.kind.startswith("allow" if decision == "allow" else "reject") for o in chosen)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=st.text(alphabet=st.sampled_from("ab./\0~ -"), max_size=30))
def test_any_path_stays_inside_or_is_refused(tmp_path: Path, path: str) -> None:
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    ws = Workspace(root)
    try:
        parts = ws.parts(path)
    except ToolError:
        return
    resolved = root.joinpath(*parts).resolve()
    assert resolved == root.resolve() or resolved.is_relative_to(root.resolve())


@settings(max_examples=300, deadline=None)
@given(message=json_values)
def test_any_json_is_a_message_or_a_protocol_error(message: Any) -> None:
    try:
        checked = check_message(message)
    except ProtocolError as exc:
        assert str(exc)
        return
    assert checked["jsonrpc"] == "2.0"


def test_a_request_for_another_session_is_refused(tmp_path: Path) -> None:
    from acp import RequestError

    client, _, _ = _client(tmp_path)
    with pytest.raises(RequestError):
        asyncio.run(client.read_text_file("other", str(tmp_path / "x")))
