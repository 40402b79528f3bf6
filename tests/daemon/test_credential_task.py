"""A daemon task of claude_code (real SDK, real sandbox) on a cloud key the daemon holds:
the key is read from the daemon's own environment (the client's has none), the
vendor stand-in gets it, and the task's events, usage and log carry the vendor's
usage and never the key."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from jarvisd._messages import Generation, Message, Role, ToolSpec, Usage
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import AgentSpec
from jarvisd.testing import VendorStandIn
from tests.agents.test_claude_code import use_real_sdk
from tests.conftest import require
from tests.external.test_sandboxed import IMAGE, _docker_ok

from .conftest import DaemonProcess
from .test_daemon import events_of

USAGE = Usage(900, 21)


def _model(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
    if "Bash" not in {t.name for t in tools}:
        return reply("ok", usage=USAGE)
    if any(m.role is Role.TOOL for m in messages):
        return reply("Done on the cloud.", usage=USAGE)
    return reply("", ("Bash", {"command": "echo hi", "description": "say hi"}), usage=USAGE)


@pytest.fixture
def vendor() -> Iterator[tuple[VendorStandIn, str]]:
    """The stand-in on a loop of its own (the daemon is another process)."""
    key = "sk-ant-test-" + secrets.token_hex(20)
    stand_in = VendorStandIn(ScriptedEngine(fallback=_model), key)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(stand_in.__aenter__(), loop).result(10)
    try:
        yield stand_in, key
    finally:
        asyncio.run_coroutine_threadsafe(stand_in.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_a_task_on_a_key_the_daemon_holds(
    jarvisd: DaemonProcess, vendor: tuple[VendorStandIn, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    use_real_sdk()
    require(_docker_ok(), "needs a container engine (DOCKER_HOST)")
    stand_in, key = vendor
    workspace = tmp_path / "ws"
    workspace.mkdir(mode=0o777)
    workspace.chmod(0o777)  # the sandbox user works in it
    jarvisd.write_config("max_concurrent = 1", (
        f'[sandbox]\nimage = "{IMAGE}"\nallowed_roots = ["{workspace}:rw"]\n'
        "[agents]\nwarm = 0\n"  # no agents started ahead: not what this test is about
        "[credentials.anthropic]\n"
        f'env = "DAEMON_ANTHROPIC_KEY"\nupstream = "{stand_in.url}"\ndialect = "anthropic"\n'
        'agents = ["claude_code"]\n'
    ))  # fmt: skip
    monkeypatch.setenv("DAEMON_ANTHROPIC_KEY", key)
    jarvisd.start()
    monkeypatch.delenv("DAEMON_ANTHROPIC_KEY")  # the daemon's alone from here on
    c = jarvisd.client
    info = c.submit(AgentSpec(input="Say hi.", agent="claude_code",
                              options={"workspace": str(workspace), "allowed_tools": "Bash"}))  # fmt: skip
    done = c.wait(info.id, timeout=240)
    assert done.state == "succeeded", (done, jarvisd.log_text())
    assert done.result is not None and done.result["answer"] == "Done on the cloud."
    assert done.result["engine"] == "credential:anthropic"
    assert done.result["metadata"]["sandboxed"] is True
    calls = [r for r in stand_in.requests if r.path == "/v1/messages"]
    assert len(calls) >= 2 and {r.key for r in stand_in.requests} == {key}
    assert done.result["usage"]["prompt_tokens"] == USAGE.prompt_tokens * len(calls)
    events = events_of(c, info.id)
    ends = [d for k, d in events if k == "inference_end"]
    assert [d["engine"] for d in ends] == ["upstream:anthropic"] * len(calls)
    assert "tool_call_start" in [k for k, _ in events]
    everything = json.dumps([events, done.result], default=str) + jarvisd.log.read_text()
    assert key not in everything
