"""The session records: an id never names a file outside the store, a half-written
last line (kill -9 mid-write) is skipped, and a full record stops growing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jarvisd._errors import UsageError
from jarvisd.acp import SessionStore, _store


def test_an_id_never_names_a_file_outside_the_store(tmp_path: Path) -> None:
    header = {"kind": "session", "session_id": "x", "cwd": "/", "agent": "", "mode": "simple",
              "model": "", "created": 0}  # fmt: skip
    (tmp_path / "evil.jsonl").write_text(json.dumps(header) + "\n")
    store = SessionStore(tmp_path / "sessions")
    (tmp_path / "sessions").mkdir()
    for bad in ("../evil", "../evil.jsonl", "/etc/passwd", "A" * 32, "", "0" * 31):
        with pytest.raises(UsageError, match="no such session"):
            store.open(bad)


def test_a_torn_last_line_is_skipped_and_a_full_record_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SessionStore(tmp_path)
    header, record = store.create(cwd="/p", agent="", mode="simple", model="")
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}
    record.append({"kind": "update", "update": update})
    with record.path.open("ab") as torn:
        torn.write(b'{"kind": "update", "update": {"sessionUp')
    _, reopened, updates = store.open(header.session_id)
    assert updates == [update]
    reopened.append({"kind": "update", "update": update})  # after the fragment, not in it
    assert store.open(header.session_id)[2] == [update, update]
    monkeypatch.setattr(_store, "MAX_SESSION_BYTES", record.path.stat().st_size + 10)
    _, again, _ = store.open(header.session_id)
    again.append({"kind": "update", "update": update})
    assert record.path.stat().st_size <= _store.MAX_SESSION_BYTES
    assert [h.session_id for h in store.list()] == [header.session_id]
