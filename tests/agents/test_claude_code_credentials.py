"""claude_code in the real sandbox with a "real" Anthropic key the host holds
(``[credentials.anthropic]``, used by claude_code): the gateway forwards the SDK's requests to a vendor
stand-in (a real HTTP server on loopback speaking Anthropic Messages, streamed, with
usage) and adds the key there. The key never enters the container: a scan run inside
it by the agent's own Bash tool reads every process's environment and command line
and every file it can read, and finds nothing; the frames and events the host got do
not hold it either. The vendor saw it; the run's ledger holds the vendor's usage; a
--max-tokens-total budget stops the run at its next request.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from jarvisd._config import CredentialConfig
from jarvisd._messages import Generation, Message, Role, ToolSpec, Usage
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import AgentSpec, RunOutcome, run_spec
from jarvisd.testing import VendorStandIn
from tests.agents.test_claude_code import sandbox_config, use_real_sdk

KEY_ENV = "JARVIS_TEST_ANTHROPIC_KEY"
#: What the vendor reports for each call.
USAGE = Usage(1200, 34)

# Run in the container by Claude Code's Bash tool. The key is never in it (only
# reversed, and read from stdin): what it prints is counts, the files and processes
# where the key was found, and the values of ANTHROPIC_API_KEY it saw.
_SCAN = r"""
import json, os, stat, sys
key = sys.stdin.read().strip()[::-1].encode()
hits, files, size, keys, procs = [], 0, 0, set(), 0
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for part in ("environ", "cmdline"):
        try:
            data = open(f"/proc/{pid}/{part}", "rb").read()
        except OSError:
            continue
        procs += part == "environ"
        if key in data:
            hits.append(f"/proc/{pid}/{part}")
        for item in data.split(b"\0") if part == "environ" else ():
            if item.startswith(b"ANTHROPIC_API_KEY="):
                keys.add(item.split(b"=", 1)[1].decode())
for top, dirs, names in os.walk("/"):
    if top == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    for name in names:
        path = os.path.join(top, name)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            with open(path, "rb") as f:
                tail = b""
                while chunk := f.read(1 << 20):
                    if key in tail + chunk:
                        hits.append(path)
                        break
                    tail = chunk[-len(key):]
                    size += len(chunk)
            files += 1
        except OSError:
            pass
print("SCAN " + json.dumps({"hits": hits, "files": files, "bytes": size, "procs": procs,
                            "api_keys": sorted(keys)}))
"""


def _scan_command(key: str) -> str:
    script = base64.b64encode(_SCAN.encode()).decode()
    return f"echo {key[::-1]} | python3 -c \"import base64; exec(base64.b64decode('{script}'))\""


def _vendor(command: str) -> ScriptedEngine:
    """Claude Code's model at the vendor: runs ``command`` with Bash, then answers."""

    def model(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if "Bash" not in {t.name for t in tools}:  # a side call of the SDK's
            return reply("ok", usage=USAGE)
        if any(m.role is Role.TOOL for m in messages):
            return reply("Scanned.", usage=USAGE)
        return reply("", ("Bash", {"command": command, "description": "scan"}), usage=USAGE)

    return ScriptedEngine(fallback=model)


def _run(
    workspace: Path, vendor: ScriptedEngine, key: str, **budget: int
) -> tuple[RunOutcome, RunContext, list[Any], list[Any], list[str]]:
    """One sandboxed claude_code run against a vendor stand-in; returns its outcome, its
    run, every event on its bus, what the vendor was sent and the bridge's start frames."""
    from jarvisd.bridge import FrameSession

    config = sandbox_config(workspace)
    starts: list[str] = []
    serve = FrameSession.run

    async def spy(self: Any, start: Any) -> Any:  # the start frame the bridge is sent
        starts.append(json.dumps(start.payload))
        return await serve(self, start)

    async def main() -> tuple[RunOutcome, RunContext, list[Any], list[Any]]:
        async with VendorStandIn(vendor, key) as stand_in:
            # The user's config: the key's variable, the vendor (here on loopback), and
            # claude_code as the agent that uses it.
            credential = CredentialConfig(
                env=KEY_ENV, upstream=stand_in.url, dialect="anthropic", agents=("claude_code",)
            )
            with_key = replace(config, credentials={"anthropic": credential})
            run = RunContext()
            events: list[Any] = []
            run.bus.subscribe(lambda e: events.append((e.type.value, e.data)))
            spec = AgentSpec(
                "Scan the sandbox.", agent="claude_code",
                options={"workspace": str(workspace), "allowed_tools": "Bash"}, **budget,
            )  # fmt: skip
            outcome = await run_spec(spec, run, with_key)
            return outcome, run, events, list(stand_in.requests)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FrameSession, "run", spy)
        patch.setenv(KEY_ENV, key)
        outcome, run, events, requests = asyncio.run(main())
    return outcome, run, events, requests, starts


def test_the_key_stays_on_the_host_and_the_vendors_usage_is_counted(tmp_path: Path) -> None:
    use_real_sdk()
    key = "sk-ant-test-" + secrets.token_hex(20)
    vendor = _vendor(_scan_command(key))
    outcome, run, events, requests, starts = _run(tmp_path, vendor, key)
    assert outcome.failure is None, outcome.failure
    assert outcome.answer == "Scanned."
    (scan,) = [r for r in outcome.tool_results if r.tool_name == "Bash"]
    report = json.loads(scan.content.split("SCAN ", 1)[1].splitlines()[0])
    # The scan read the processes (the agent's, the bridge's, its own) and the image,
    # the agent's tree, Node.js and the mounts: the key is nowhere.
    assert report["hits"] == [], report

    assert report["procs"] >= 3 and report["files"] > 1000 and report["bytes"] > 50_000_000
    # What the SDK was given as its key is the run's token, which is what it holds.
    (start,) = starts
    token = json.loads(start)["env"]["ANTHROPIC_API_KEY"]
    assert token != key and report["api_keys"] == [token]
    # The host's frames and events: no key either.
    for text in (start, json.dumps(events, default=str), json.dumps(outcome.to_dict())):
        assert key not in text
    # The vendor got the key on every request, and never the run's token.
    inferences = [r for r in requests if r.path == "/v1/messages"]
    assert len(inferences) >= 2
    assert {r.key for r in requests} == {key}
    assert not any(token in value for r in requests for value in r.headers.values())
    # The ledger holds what the vendor reported, call for call.
    assert len(vendor.calls) == len(inferences)
    assert run.budget.used == Usage(
        USAGE.prompt_tokens * len(inferences), USAGE.completion_tokens * len(inferences)
    )
    assert outcome.usage == run.budget.used
    ends = [d for t, d in events if t == "inference_end" and d["engine"] == "upstream:anthropic"]
    assert len(ends) == len(inferences) and all(d["prompt_tokens"] == 1200 for d in ends)


@pytest.mark.parametrize("where", ["next request", "mid-stream"])
def test_a_budget_stops_the_run(tmp_path: Path, where: str) -> None:
    """A budget of exactly the first call's usage: that call ends, its tool runs, the
    next request is refused on the host. A smaller one: the first call's stream is cut
    as soon as the vendor's reported usage passes it, before its tool call is run."""
    use_real_sdk()
    key = "sk-ant-test-" + secrets.token_hex(20)
    vendor = _vendor("true")
    budget = USAGE.total_tokens if where == "next request" else 1000
    outcome, run, events, requests, _ = _run(tmp_path, vendor, key, max_tokens_total=budget)
    assert outcome.failure is not None and outcome.failure.code == "budget", outcome.failure
    # The one call the budget allowed asked for no more output than the budget held
    # and was charged what the vendor reported; no other request left the host.
    (call,) = vendor.calls
    assert call.options.max_tokens <= budget
    assert [r.path for r in requests if r.path == "/v1/messages"] == ["/v1/messages"]
    assert run.budget.used == USAGE
    assert run.cancel.cancelled
    ran = [d["tool"] for t, d in events if t == "tool_call_start"]
    assert ran == (["Bash"] if where == "next request" else [])
