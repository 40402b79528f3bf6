"""codex (the real codex-acp, pinned) in the real sandbox on a cloud key the host holds:
``--engine NAME`` naming ``[credentials.NAME]`` whose upstream is a vendor stand-in
speaking OpenAI Responses (streamed, with usage). The agent's own shell tool scans
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
from jarvisd._run import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import AgentSpec, run_spec
from jarvisd.testing import VendorStandIn
from tests.agents.test_claude_code_credentials import _scan_command

from .test_real_agents import _ready, real_agents_dir  # noqa: F401 - its fixture
from .test_sandboxed import IMAGE

pytestmark = pytest.mark.slow

USAGE = Usage(2100, 55)


def test_codex_on_a_host_held_key(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _ready("codex")
    key = "sk-proj-test-" + secrets.token_hex(20)
    monkeypatch.setenv("JARVIS_TEST_OPENAI_KEY", key)

    def model(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if "exec_command" not in {t.name for t in tools}:
            return reply("title", usage=USAGE)
        if any(m.role is Role.TOOL for m in messages):
            return reply("Scanned.", usage=USAGE)
        return reply("", ("exec_command", {"cmd": _scan_command(key)}), usage=USAGE)

    vendor = ScriptedEngine(fallback=model)
    workspace.chmod(0o777)  # the sandbox user works in it
    run = RunContext()
    events: list[Any] = []
    run.bus.subscribe(lambda e: events.append((e.type.value, e.data)))

    async def main() -> tuple[Any, list[Any]]:
        async with VendorStandIn(vendor, key) as stand_in:
            config = parse_config({
                "sandbox": {"image": IMAGE, "allowed_roots": [f"{workspace.parent}:rw"]},
                "credentials": {"cloud": {"env": "JARVIS_TEST_OPENAI_KEY", "dialect": "openai",
                                          "upstream": stand_in.url, "model": "gpt-test"}},
            })  # fmt: skip
            spec = AgentSpec("Scan.", agent="codex", engine="cloud",
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
    inferences = [r for r in requests if r.path == "/v1/responses"]
    assert inferences and {r.key for r in requests} == {key}
    assert all(r.headers["authorization"] == f"Bearer {key}" for r in inferences)
    assert run.budget.used == Usage(
        USAGE.prompt_tokens * len(inferences), USAGE.completion_tokens * len(inferences)
    )
