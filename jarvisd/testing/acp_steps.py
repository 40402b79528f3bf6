"""A scripted ACP agent whose sessions survive its process, for resume tests.

``python -m jarvisd.testing.acp_steps [STEPS] [THINK_S] [--no-load]``: it advertises
``loadSession`` (unless ``--no-load``) and keeps each session's history under its
HOME (``$HOME/sessions/ID.jsonl``, one update a line), as a real agent keeps its own.
``session/load`` replays that history as ``session/update`` notifications before it
answers. A prompt, new or the note of a resumed run, carries the script on from the
first step its history does not show completed; so a step is never run twice by it,
and a step run twice (by someone replaying it) shows in the workspace.

Step ``i`` (after ``THINK_S`` of "thinking") is one tool call ``step-i``: its start is
sent, then written to the history, then its effect happens (``log.txt`` in the
session's cwd gets the line ``step i``, and ``step-i.txt`` is written), then its end
is written to the history, then sent. The answer is ``done: STEPS steps``.

Standard library only: it is started as a separate process (in the sandbox too).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


class Session:
    def __init__(self, session_id: str, cwd: str) -> None:
        self.id = session_id
        self.cwd = cwd
        folder = Path(os.environ.get("HOME") or ".") / "sessions"
        folder.mkdir(parents=True, exist_ok=True)
        self.file = folder / f"{session_id}.jsonl"

    def history(self) -> list[dict[str, Any]]:
        if not self.file.exists():
            return []
        lines = self.file.read_text().splitlines()
        # A line cut short by a kill is not part of the history.
        return [json.loads(line) for line in lines if line.endswith("}")]

    def keep(self, update: dict[str, Any]) -> None:
        with open(self.file, "a") as file:
            file.write(json.dumps(update) + "\n")

    def send(self, update: dict[str, Any]) -> None:
        _send({"method": "session/update", "params": {"sessionId": self.id, "update": update}})

    def completed(self) -> set[str]:
        return {
            str(u.get("toolCallId"))
            for u in self.history()
            if u.get("sessionUpdate") == "tool_call_update" and u.get("status") == "completed"
        }


def _step(session: Session, i: int) -> None:
    call = f"step-{i}"
    start = {
        "sessionUpdate": "tool_call",
        "toolCallId": call,
        "title": f"write step {i}",
        "kind": "edit",
        "status": "in_progress",
        "rawInput": {"path": f"step-{i}.txt"},
    }
    session.send(start)
    session.keep(start)
    with open(os.path.join(session.cwd, "log.txt"), "a") as log:
        log.write(f"step {i}\n")
    with open(os.path.join(session.cwd, f"step-{i}.txt"), "w") as out:
        out.write(f"{i}\n")
    end = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": call,
        "status": "completed",
        "content": [{"type": "content", "content": {"type": "text", "text": f"wrote {i}"}}],
    }
    session.keep(end)
    session.send(end)


def _prompt(session: Session, text: str, steps: int, think: float) -> str:
    session.keep({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}})
    done = session.completed()
    for i in range(steps):
        if f"step-{i}" in done:
            continue
        time.sleep(think)
        _step(session, i)
    answer = {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": f"done: {steps} steps"},
    }
    session.keep(answer)
    session.send(answer)
    return "end_turn"


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    steps = int(args[0]) if args else 5
    think = float(args[1]) if len(args) > 1 else 0.2
    loads = "--no-load" not in sys.argv
    sessions: dict[str, Session] = {}
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method == "initialize":
            capabilities = {"loadSession": loads}
            _send(
                {"id": ident, "result": {"protocolVersion": 1, "agentCapabilities": capabilities}}
            )
        elif method == "session/new":
            session = Session(f"s-{uuid.uuid4().hex[:12]}", params.get("cwd", "/"))
            session.file.touch()
            sessions[session.id] = session
            _send({"id": ident, "result": {"sessionId": session.id}})
        elif method == "session/load" and loads:
            session = Session(str(params.get("sessionId")), params.get("cwd", "/"))
            if not session.file.exists():
                _send({"id": ident, "error": {"code": -32002, "message": "no such session"}})
                continue
            for update in session.history():
                session.send(update)
            sessions[session.id] = session
            _send({"id": ident, "result": {}})
        elif method == "session/prompt" and params.get("sessionId") in sessions:
            session = sessions[params["sessionId"]]
            text = "".join(b.get("text", "") for b in params.get("prompt") or ())
            stop = _prompt(session, text, steps, think)
            _send({"id": ident, "result": {"stopReason": stop}})
        elif ident is not None:
            _send({"id": ident, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
