"""``acpx`` (npm, pinned in packaging/dev/acpx, installed by ``setup.sh --test``), a
real third-party ACP client, drives ``jarvis acp`` on a scripted engine: streamed text,
a tool call with its updates, permission requests answered by ``--approve-reads`` and
``--deny-all``, and a cancel of a persistent session's prompt."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from jarvisd._messages import Generation, Message, Role, ToolSpec
from jarvisd.engines import reply
from jarvisd.testing import OllamaStandIn

from ..conftest import require
from ._client import Slow, env

ACPX = Path.home() / ".cache/jarvis/test-tools/acpx/node_modules/.bin/acpx"
AGENT = shlex.join([sys.executable, "-m", "jarvisd", "acp", "--engine", "ollama", "--model",
                    "scripted", "--agent", "orchestrator", "--tools", "calculator,file_read"])  # fmt: skip


def script(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
    user = next(m.content for m in reversed(messages) if m.role is Role.USER)
    if messages[-1].role is Role.TOOL:
        return reply(f"the tool said: {messages[-1].content[:200]}")
    if "read /etc/hostname" in user:
        return reply("", ("file_read", {"path": "/etc/hostname"}))
    return reply(f"hello from jarvis about {user[:40]}")


@pytest.fixture
def standin() -> Iterator[OllamaStandIn]:
    with OllamaStandIn(Slow(fallback=script)) as server:
        yield server


def _env(standin: OllamaStandIn, home: Path) -> dict[str, str]:
    return env(OLLAMA_HOST=standin.url, HOME=str(home))


def acpx(
    args: Sequence[str], standin: OllamaStandIn, home: Path, cwd: Path, code: int = 0
) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(ACPX), "--ttl", "2", *args], env=_env(standin, home), cwd=cwd,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == code, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def updates(messages: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [
        m["params"]["update"]
        for m in messages
        if m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] == kind
    ]


def test_acpx_drives_jarvis_acp(standin: OllamaStandIn, tmp_path: Path) -> None:
    require(ACPX.exists(), f"acpx is not installed in {ACPX} (run packaging/dev/setup.sh --test)")
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()

    # One shot: a read is allowed by --approve-reads; the call, its updates, the answer.
    out = acpx(["--format", "json", "--approve-reads", "--agent", AGENT, "exec", "read /etc/hostname"],
               standin, home, project)  # fmt: skip
    init = next(
        m for m in out if m.get("id") == 0 and "result" in m and "agentCapabilities" in m["result"]
    )
    assert init["result"]["agentCapabilities"]["loadSession"] is True
    (start,) = updates(out, "tool_call")
    (end,) = updates(out, "tool_call_update")
    assert (start["title"], start["kind"], start["rawInput"]) == (
        "file_read",
        "read",
        {"path": "/etc/hostname"},
    )
    asked = next(m for m in out if m.get("method") == "session/request_permission")
    assert asked["params"]["toolCall"]["toolCallId"] == start["toolCallId"]
    answer = next(m for m in out if m.get("id") == asked["id"] and "outcome" in m.get("result", {}))
    assert answer["result"]["outcome"]["optionId"] == "allow"
    assert end["toolCallId"] == start["toolCallId"] and "Denied" not in json.dumps(end)
    text = "".join(u["content"]["text"] for u in updates(out, "agent_message_chunk"))
    assert text.startswith("the tool said:")
    assert any(m.get("result", {}).get("stopReason") == "end_turn" for m in out)

    # A persistent session (its queue owner keeps one `jarvis acp` running): --deny-all
    # fails the call as denied and the run still answers (acpx exits 5: a permission
    # was denied); then a cancel of a prompt that never ends.
    acpx(["--agent", AGENT, "sessions", "new"], standin, home, project)
    out = acpx(["--format", "json", "--deny-all", "--agent", AGENT, "read /etc/hostname"],
               standin, home, project, code=5)  # fmt: skip
    (end,) = updates(out, "tool_call_update")
    assert end["status"] == "failed" and "Denied" in end["content"][0]["content"]["text"]
    # The --deny-all prompt's queue owner retires after its 2 s TTL. A prompt sent
    # while it is retiring can be lost inside acpx (seen under load), so the slow
    # prompt starts a fresh owner once that one is gone (polled through acpx's status).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = subprocess.run(
            [str(ACPX), "--agent", AGENT, "status"], env=_env(standin, home), cwd=project,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if "queue owner healthy" not in status.stdout:
            break
        time.sleep(0.2)
    slow = subprocess.Popen(
        [str(ACPX), "--ttl", "2", "--format", "json", "--agent", AGENT, "slow one"],
        env=_env(standin, home), cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not getattr(standin.engine, "slow_started", False) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not getattr(standin.engine, "slow_started", False):
            slow.kill()
            stdout, stderr = slow.communicate(timeout=30)
            pytest.fail(
                f"the slow prompt never reached the engine:\n{stdout[-2000:]}\n{stderr[-3000:]}"
            )
        acpx(["--agent", AGENT, "cancel"], standin, home, project)
        stdout, stderr = slow.communicate(timeout=60)
    finally:
        if slow.poll() is None:
            slow.kill()
            slow.communicate(timeout=30)  # also closes the pipes
    out = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert any(m.get("result", {}).get("stopReason") == "cancelled" for m in out), stderr[-2000:]
