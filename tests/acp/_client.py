"""An ACP client (the SDK's client side) that records what ``jarvis acp`` sends."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

from acp import schema

from jarvisd._messages import Generation, Message, Role
from jarvisd.engines import ScriptedEngine

#: The command that runs this tree's jarvis.
JARVIS = (sys.executable, "-m", "jarvisd")


class RecordingClient:
    """Answers permission requests from a script of option ids and records updates."""

    def __init__(self, answers: Sequence[str] = ()) -> None:
        self.updates: list[Any] = []
        self.asked: list[Any] = []
        self.answers = list(answers)
        self.written: dict[str, str] = {}
        self.read: list[str] = []

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append(update)

    async def request_permission(
        self, session_id: str, tool_call: Any, options: Any, **_: Any
    ) -> Any:
        self.asked.append(tool_call)
        answer = self.answers.pop(0) if self.answers else "reject"
        if answer == "hang":  # never answers (until cancelled)
            await asyncio.sleep(3600)
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=answer)
        )

    async def read_text_file(self, session_id: str, path: str, **_: Any) -> Any:
        self.read.append(path)
        return schema.ReadTextFileResponse(content=f"unsaved buffer of {path}")

    async def write_text_file(self, session_id: str, path: str, content: str, **_: Any) -> None:
        self.written[path] = content

    def of(self, kind: str) -> list[Any]:
        return [u for u in self.updates if u.session_update == kind]

    def text(self) -> str:
        return "".join(u.content.text for u in self.of("agent_message_chunk"))


def env(**extra: str) -> dict[str, str]:
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_root(), environ.get("PYTHONPATH", "")]))
    environ.update(extra)
    return environ


def _root() -> str:
    import jarvisd

    return os.path.dirname(os.path.dirname(os.path.abspath(jarvisd.__file__)))


class Slow(ScriptedEngine):
    """A scripted engine whose reply to a task that says "slow" never comes (in test
    time): for cancels. ``slow_started`` tells a test it is waiting there."""

    slow_started = False

    async def generate(self, messages: Sequence[Message], **kwargs: Any) -> Generation:
        if any("slow" in m.content for m in messages if m.role is Role.USER):
            self.slow_started = True
            await asyncio.sleep(60)
        return await super().generate(messages, **kwargs)
