"""codex and claude (the real codex-acp and claude-agent-acp, pinned) in the real
sandbox on a cloud key the host holds: ``--engine NAME`` naming ``[credentials.NAME]``
whose upstream is a vendor stand-in speaking the agent's API (OpenAI Responses,
Anthropic Messages; streamed, with usage). The agent's own shell tool scans
its container for the key (processes' environments and command lines, every
readable file) and finds nothing; the vendor got the key; the ledger holds the
vendor's usage.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from jarvisd._config import parse_config
from jarvisd._messages import Generation, Message, Role, ToolSpec, Usage
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import AgentSpec, run_spec
from jarvisd.testing import VendorStandIn
from tests.agents.test_claude_code_credentials import _scan_command

from .test_real_agents import _ready, real_agents_dir  # noqa: F401 - its fixture
from .test_sandboxed import IMAGE

pytestmark = pytest.mark.slow

USAGE = Usage(2100, 55)


#: agent: (its shell tool, the tool's command argument, the API, its path, the key's header)
AGENTS = {
    "codex": ("exec_command", "cmd", "openai", "/v1/responses", "authorization"),
    "claude": ("Bash", "command", "anthropic", "/v1/messages", "x-api-key"),
}


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_an_acp_agent_on_a_host_held_key(
    agent: str, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ready(agent)
    tool, argument, dialect, path, header = AGENTS[agent]
    key = "sk-test-" + secrets.token_hex(20)
    monkeypatch.setenv("JARVIS_TEST_CLOUD_KEY", key)

    def model(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if tool not in {t.name for t in tools}:
            return reply("title", usage=USAGE)
        if any(m.role is Role.TOOL for m in messages):
            return reply("Scanned.", usage=USAGE)
        return reply("", (tool, {argument: _scan_command(key), "description": "scan"}),
                     usage=USAGE)  # fmt: skip

    vendor = ScriptedEngine(fallback=model)
    workspace.chmod(0o777)  # the sandbox user works in it
    run = RunContext()
    events: list[Any] = []
    run.bus.subscribe(lambda e: events.append((e.type.value, e.data)))

    async def main() -> tuple[Any, list[Any]]:
        async with VendorStandIn(vendor, key) as stand_in:
            config = parse_config({
                "sandbox": {"image": IMAGE, "allowed_roots": [f"{workspace.parent}:rw"]},
                "agents": {"permissions": {"execute": "allow"}},
                "credentials": {"cloud": {"env": "JARVIS_TEST_CLOUD_KEY", "dialect": dialect,
                                          "upstream": stand_in.url, "model": "vendor-model"}},
            })  # fmt: skip
            spec = AgentSpec("Scan.", agent=agent, engine="cloud",
                             options={"workspace": str(workspace)}, max_wall=240)  # fmt: skip
            outcome = await run_spec(spec, run, config, trace=False)
            return outcome, list(stand_in.requests)

    outcome, requests = asyncio.run(main())
    assert outcome.failure is None, outcome.failure
    assert outcome.engine == "credential:cloud"
    # The scan's report, as the agent sent it on to the vendor with its next request.
    (text,) = [str(m.content) for c in vendor.calls for m in c.messages
               if m.role is Role.TOOL and "SCAN " in str(m.content)]  # fmt: skip
    report = json.loads(text.split("SCAN ", 1)[1].splitlines()[0])
    assert report["hits"] == [], report
    assert report["procs"] >= 2 and report["files"] > 1000
    assert key not in json.dumps(events, default=str) + json.dumps(outcome.to_dict())
    inferences = [r for r in requests if r.path == path]
    assert inferences and {r.key for r in requests} == {key}
    sent = f"Bearer {key}" if header == "authorization" else key
    assert all(r.headers[header] == sent for r in inferences)
    assert run.budget.used == Usage(
        USAGE.prompt_tokens * len(inferences), USAGE.completion_tokens * len(inferences)
    )
