"""Small parts tested alone: the watch filter, protocol parsing, the store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from jarvisd._errors import ProtocolError, TaskNotFound
from jarvisd.daemon import TaskStore, WatchFilter
from jarvisd.daemon._protocol import (
    ErrorReply,
    TaskAnswer,
    TaskInfo,
    TaskReply,
    TaskSubmit,
    Waiting,
    encode,
    parse_reply,
    parse_request,
)
from jarvisd.runs import AgentSpec


def test_watch_filter(tmp_path: Path) -> None:
    own = tmp_path / "state"
    accept = WatchFilter.for_daemon([own])
    assert accept(str(tmp_path / "src" / "a.py"))
    assert not accept(str(tmp_path / ".git" / "index"))
    assert not accept(str(tmp_path / "pkg" / "__pycache__" / "a.pyc"))
    assert not accept(str(tmp_path / "a.py.swp")) and not accept(str(tmp_path / "a.py~"))
    assert not accept(str(own / "jarvisd.db-wal"))
    assert accept(str(tmp_path / "statement.txt"))  # a prefix of a name is not a parent


def test_request_round_trip_and_errors() -> None:
    req = TaskSubmit(id="r1", spec=AgentSpec(input="x", tools=("calculator",)), watch="/w")
    assert parse_request(encode(req)) == req
    with pytest.raises(ProtocolError, match="version"):
        parse_request(b'{"v": 9, "op": "ping"}')
    with pytest.raises(ProtocolError, match="'tools' must be a list of strings"):
        parse_request(b'{"v":1,"op":"task.submit","spec":{"input":"x","tools":"ab"}}')
    with pytest.raises(ProtocolError, match="unknown agent spec fields"):
        parse_request(b'{"v":1,"op":"ask","spec":{"input":"x","evil":1}}')
    with pytest.raises(ProtocolError, match="'since' must not be negative"):
        parse_request(b'{"v":1,"op":"task.logs","task":"a","since":-1}')
    with pytest.raises(ProtocolError, match="JSON"):
        parse_request(b"\xff\xfe")


def test_reply_round_trip(tmp_path: Path) -> None:
    store = TaskStore(tmp_path / "t.db")
    store.open()
    info = store.create(AgentSpec(input="hi"), timeout=5.0)
    reply = TaskReply(id="x", task=info)
    assert parse_reply(encode(reply)) == reply
    err = ErrorReply(id="y", code="not_found", message="no task")
    assert parse_reply(encode(err)) == err
    assert TaskInfo.from_dict(info.to_dict()) == info
    waiting = replace(info, state="running", waiting=Waiting("write a", "edit", 1.0, 601.0))
    assert parse_reply(encode(TaskReply(id="z", task=waiting))) == TaskReply(id="z", task=waiting)


def test_task_answer_is_typed() -> None:
    req = TaskAnswer(id="a1", task="abc", allow=True)
    assert parse_request(encode(req)) == req
    with pytest.raises(ProtocolError, match="'allow' must be true or false"):
        parse_request(b'{"v":1,"op":"task.answer","task":"abc","allow":"yes"}')
    with pytest.raises(ProtocolError, match="'allow' must be true or false"):
        parse_request(b'{"v":1,"op":"task.answer","task":"abc"}')


def test_store_events_checkpoints_and_open_calls(tmp_path: Path) -> None:
    store = TaskStore(tmp_path / "t.db")
    store.open()
    task = store.create(AgentSpec(input="hi"))
    assert store.append_event(task.id, "tool_call_start", {"tool": "a", "call_id": "1"}).seq == 1
    store.save_checkpoint(task.id, {"turns": 1})
    store.append_event(task.id, "tool_call_start", {"tool": "b", "call_id": "2"})
    store.append_event(task.id, "tool_call_end", {"tool": "a", "call_id": "1"})
    assert [c["call_id"] for c in store.open_tool_calls(task.id)] == ["2"]
    cp = store.checkpoint(task.id)
    assert cp.state == {"turns": 1} and cp.seq == 1 and cp.turns == 1
    assert store.tool_calls_since(task.id, cp.seq) == 1
    assert [e.seq for e in store.events(task.id, since=1)] == [2, 3]
    store.close()
    reopened = TaskStore(tmp_path / "t.db")  # durable across a new connection
    reopened.open()
    assert reopened.get(task.id).last_seq == 3
    with pytest.raises(TaskNotFound):
        reopened.get("0000")
    with pytest.raises(TaskNotFound):
        reopened.get("not-hex!")
