"""A code-changing prompt through ``jarvis acp`` (the session's ``code`` mode) on a
scripted CodeAct engine and a real container engine: the client receives the change as
ACP ``diff`` content; once allowed it is written through the client's
``fs/write_text_file`` (the project itself untouched by jarvis); refused, the project
is untouched and the workspace gone; a client without fs gets jarvis's three-way
apply."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import acp
import pytest
from acp import schema

from jarvisd._messages import Generation, Message, Role, ToolSpec
from jarvisd._paths import paths
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.testing import OllamaStandIn
from tests.code.conftest import CALC, FIXED, TEST, git, tree_hashes
from tests.conftest import require
from tests.sandbox.conftest import engine_problem

from ._client import JARVIS, RecordingClient, env

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def script(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
    first = next(m.content for m in messages if m.role is Role.USER)
    if sum(m.role is Role.ASSISTANT for m in messages) >= 1:
        return reply("add subtracted; it adds now.")
    where = re.search(r"files are in the directory (\S+) ", first)
    assert where, first
    path = where.group(1) + "/calc.py"
    return reply(f"```python\nopen({path!r}, 'w').write({FIXED!r})\nprint('written')\n```")


@pytest.fixture
def standin() -> Iterator[OllamaStandIn]:
    with OllamaStandIn(ScriptedEngine(fallback=script)) as server:
        yield server


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "calc.py").write_text(CALC)
    (root / "test_calc.py").write_text(TEST)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root


def _workspaces() -> list[Path]:
    root = paths().state / "code"
    return [p for p in root.iterdir()] if root.is_dir() else []


def test_a_change_is_offered_as_a_diff_and_written_by_the_client(
    standin: OllamaStandIn, project: Path
) -> None:
    problem = engine_problem()
    require(not problem, problem)
    command = (*JARVIS, "acp", "--engine", "ollama", "--model", "scripted")

    async def session(client: RecordingClient, writes: bool, prompts: int) -> None:
        async with acp.spawn_agent_process(
            client, *command, env=env(OLLAMA_HOST=standin.url), cwd=project
        ) as (conn, _):
            fs = schema.FileSystemCapabilities(read_text_file=False, write_text_file=writes)
            await asyncio.wait_for(conn.initialize(protocol_version=acp.PROTOCOL_VERSION,
                                                   client_capabilities=schema.ClientCapabilities(fs=fs)), 60)  # fmt: skip
            new = await conn.new_session(cwd=str(project), mcp_servers=[])
            assert "code" in {m.id for m in new.modes.available_modes}
            await conn.set_session_mode(session_id=new.session_id, mode_id="code")
            for _ in range(prompts):
                done = await asyncio.wait_for(
                    conn.prompt(
                        session_id=new.session_id, prompt=[acp.text_block("fix add in calc.py")]
                    ),
                    300,
                )
                assert done.stop_reason == "end_turn"

    before = tree_hashes(project)
    # Allowed, then refused, with a client that writes files.
    client = RecordingClient(answers=["allow", "reject"])
    asyncio.run(session(client, writes=True, prompts=2))
    offers = [u for u in client.of("tool_call") if u.kind == "edit"]
    assert len(offers) == 2
    (diff,) = offers[0].content
    assert (diff.type, diff.path, diff.old_text, diff.new_text) == (
        "diff",
        str(project / "calc.py"),
        CALC,
        FIXED,
    )
    assert [a.tool_call_id for a in client.asked] == [o.tool_call_id for o in offers]
    assert client.written == {str(project / "calc.py"): FIXED}  # the first one only
    results = {u.tool_call_id: u.status for u in client.of("tool_call_update")}
    assert [results[o.tool_call_id] for o in offers] == ["completed", "failed"]
    assert tree_hashes(project) == before  # jarvis itself wrote nothing to the project
    assert _workspaces() == []  # both workspaces discarded

    # Allowed, with a client that does not write files: jarvis's three-way apply.
    client = RecordingClient(answers=["allow"])
    asyncio.run(session(client, writes=False, prompts=1))
    assert client.written == {}
    assert (project / "calc.py").read_text() == FIXED
    assert "applied by jarvis" in client.text()
