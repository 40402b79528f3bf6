"""``jarvis acp`` driven by the ACP Python SDK's client side, as a separate process on
a scripted engine (an Ollama stand-in): streamed text, tool calls with their updates,
permission requests allowed and denied, a cancel, and ``session/load`` of a session
after the agent was killed with SIGKILL and started again."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import acp
import pytest
from acp import schema

from jarvisd._messages import Generation, Message, Role, ToolSpec
from jarvisd.engines import reply
from jarvisd.testing import OllamaStandIn

from ._client import JARVIS, RecordingClient, Slow, env

MCP_SERVER = str(Path(__file__).parents[1] / "mcp" / "stdlib_server.py")
FLAGS = ("acp", "--engine", "ollama", "--model", "scripted", "--agent", "orchestrator",
         "--tools", "calculator,file_read")  # fmt: skip


def script(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
    user = next(m.content for m in reversed(messages) if m.role is Role.USER)
    if messages[-1].role is Role.TOOL:
        return reply(f"the tool said: {messages[-1].content[:200]}")
    if "calc 6*7" in user:
        return reply("", ("calculator", {"expression": "6*7"}))
    if "mcp add 2 3" in user:
        return reply("", ("acp_calc.add", {"a": 2, "b": 3}))
    if "read /etc/hostname" in user:
        return reply("", ("file_read", {"path": "/etc/hostname"}))
    return reply(f"hello from jarvis about {user[:40]}")


@pytest.fixture
def standin() -> Iterator[OllamaStandIn]:
    with OllamaStandIn(Slow(fallback=script)) as server:
        yield server


async def _start(client: RecordingClient, url: str, cwd: Path) -> Any:
    return acp.spawn_agent_process(client, *JARVIS, *FLAGS, env=env(OLLAMA_HOST=url), cwd=cwd)


async def _init(conn: Any, reads: bool = False) -> Any:
    fs = schema.FileSystemCapabilities(read_text_file=reads, write_text_file=False)
    return await asyncio.wait_for(
        conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=schema.ClientCapabilities(fs=fs),
        ),
        60,
    )


def test_prompt_tools_permissions_cancel(
    standin: OllamaStandIn, tmp_path: Path, isolated_dirs: Path
) -> None:
    # file_read may read /etc; the client offers its buffers (fs/read_text_file).
    (isolated_dirs / "config" / "config.toml").write_text('[tools]\nfile_read_roots = ["/etc"]\n')

    async def main() -> None:
        client = RecordingClient(answers=["allow", "reject", "allow"])
        async with await _start(client, standin.url, tmp_path) as (conn, _proc):
            init = await _init(conn, reads=True)
            caps = init.agent_capabilities
            assert caps.load_session and caps.mcp_capabilities is not None
            assert not caps.prompt_capabilities.image  # no jarvis agent takes images
            new = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            sid = new.session_id
            assert new.modes.current_mode_id == "orchestrator"
            assert {"orchestrator", "simple"} <= {m.id for m in new.modes.available_modes}

            # Streamed text.
            done = await asyncio.wait_for(
                conn.prompt(session_id=sid, prompt=[acp.text_block("say hi")]), 60
            )
            assert done.stop_reason == "end_turn"
            assert "hello from jarvis about say hi" in client.text()

            # A tool of kind "think": no permission asked; its call and its update.
            client.updates.clear()
            await asyncio.wait_for(
                conn.prompt(session_id=sid, prompt=[acp.text_block("calc 6*7")]), 60
            )
            (start,) = client.of("tool_call")
            (end,) = client.of("tool_call_update")
            assert (start.title, start.kind, start.status) == ("calculator", "think", "in_progress")
            assert start.raw_input == {"expression": "6*7"}
            assert (end.tool_call_id, end.status) == (start.tool_call_id, "completed")
            assert "42" in end.content[0].content.text and "42" in client.text()
            assert client.asked == []

            # A read: asked first; allowed once, then rejected (the call fails, the run goes on).
            for expected in ("completed", "failed"):
                client.updates.clear()
                await asyncio.wait_for(
                    conn.prompt(session_id=sid, prompt=[acp.text_block("read /etc/hostname")]), 60
                )
                (start,) = client.of("tool_call")
                (end,) = client.of("tool_call_update")
                assert client.asked[-1].tool_call_id == start.tool_call_id
                assert client.asked[-1].kind == "read"
                assert start.kind == "read"
                if expected == "failed":
                    assert end.status == "failed" and "Denied" in end.content[0].content.text
                else:  # allowed: the editor's buffer, not the disk
                    assert end.status == "completed"
                    assert end.content[0].content.text == "unsaved buffer of /etc/hostname"
            assert client.read == ["/etc/hostname"]  # the denied call read nothing
            assert len(client.asked) == 2

            # The client's MCP server is the run's tool (acp_NAME.tool), asked about.
            server = schema.McpServerStdio(
                name="calc", command=sys.executable, args=[MCP_SERVER], env=[]
            )
            mcp_sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[server])).session_id
            client.updates.clear()
            await asyncio.wait_for(
                conn.prompt(session_id=mcp_sid, prompt=[acp.text_block("mcp add 2 3")]), 60
            )
            (start,) = client.of("tool_call")
            (end,) = client.of("tool_call_update")
            assert (start.title, start.kind, end.status) == ("acp_calc.add", "other", "completed")
            assert end.content[0].content.text == "5" and client.asked[-1].title == "acp_calc.add"

            # Cancel a prompt whose model never answers.
            prompt = asyncio.ensure_future(
                conn.prompt(session_id=sid, prompt=[acp.text_block("slow one")])
            )
            await asyncio.sleep(1.0)
            await conn.cancel(session_id=sid)
            stopped = await asyncio.wait_for(prompt, 60)
            assert stopped.stop_reason == "cancelled"

            # Bad requests are errors, not crashes.
            with pytest.raises(acp.RequestError):
                await conn.new_session(cwd="relative/path", mcp_servers=[])
            with pytest.raises(acp.RequestError):
                await conn.prompt(session_id="nope", prompt=[acp.text_block("x")])
            with pytest.raises(acp.RequestError):
                await conn.load_session(
                    cwd=str(tmp_path), session_id="../../etc/passwd", mcp_servers=[]
                )

    asyncio.run(main())


def test_load_after_kill_9(standin: OllamaStandIn, tmp_path: Path) -> None:
    async def main() -> str:
        first = RecordingClient()
        async with await _start(first, standin.url, tmp_path) as (conn, proc):
            await _init(conn)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            await asyncio.wait_for(
                conn.prompt(session_id=sid, prompt=[acp.text_block("first question")]), 60
            )
            await asyncio.wait_for(
                conn.prompt(session_id=sid, prompt=[acp.text_block("calc 6*7")]), 60
            )
            os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()
        sent = [u.model_dump(mode="json", by_alias=True, exclude_none=True) for u in first.updates]

        second = RecordingClient()
        async with await _start(second, standin.url, tmp_path) as (conn, _proc):
            await _init(conn)
            await asyncio.wait_for(
                conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[]), 60
            )
            replayed = [
                u.model_dump(mode="json", by_alias=True, exclude_none=True) for u in second.updates
            ]
            assert replayed == sent  # the history, as it was sent, prompts included
            users = [
                u["content"]["text"] for u in replayed if u["sessionUpdate"] == "user_message_chunk"
            ]
            assert users == ["first question", "calc 6*7"]
            assert any(u["sessionUpdate"] == "tool_call" for u in replayed)
            # The loaded session goes on.
            second.updates.clear()
            await asyncio.wait_for(
                conn.prompt(session_id=sid, prompt=[acp.text_block("again")]), 60
            )
            assert "hello from jarvis about again" in second.text()
        return sid

    sid = asyncio.run(main())
    from click.testing import CliRunner

    from jarvisd.cli import cli

    listed = CliRunner().invoke(cli, ["acp", "sessions", "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.output)
    assert row["session_id"] == sid and row["title"] == "first question"


TEAM = """\
root = "desk"

[agents.billing]
agent = "simple"

[agents.tech]
agent = "simple"

[patterns.desk]
pattern = "router"
routes = ["billing", "tech"]
descriptions = { billing = "payments", tech = "bugs" }
fallback = "billing"
"""


def test_a_team_is_the_sessions_mode_and_its_members_show_as_tool_calls(
    standin: OllamaStandIn, tmp_path: Path
) -> None:
    team = tmp_path / "team.toml"
    team.write_text(TEAM)

    async def main() -> None:
        client = RecordingClient()
        command = (*JARVIS, "acp", "--engine", "ollama", "--model", "scripted", "--team", str(team))
        async with acp.spawn_agent_process(
            client, *command, env=env(OLLAMA_HOST=standin.url), cwd=tmp_path
        ) as (conn, _):
            await _init(conn)
            new = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            assert new.modes.current_mode_id == "team"
            done = await asyncio.wait_for(
                conn.prompt(session_id=new.session_id, prompt=[acp.text_block("my bill")]), 60
            )
            assert done.stop_reason == "end_turn"
            members = [u for u in client.of("tool_call") if u.title.startswith("desk: ")]
            assert members, client.updates
            ends = {u.tool_call_id: u.status for u in client.of("tool_call_update")}
            assert all(ends.get(m.tool_call_id) == "completed" for m in members)
            assert "hello from jarvis" in client.text()

    asyncio.run(main())
