"""The real external agents (pinned npm packages, installed by `packaging/dev/setup.sh
--test` into ~/.cache/jarvis/agents), offline and sandboxed, on a scripted engine
through the run's inference gateway: a tool call, its result and the final answer; a
permission request answered by policy; a cancel mid-prompt that leaves no process,
container or socket behind."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from jarvisd._config import Config, parse_config
from jarvisd._events import Event
from jarvisd._messages import Generation, Message, SamplingOptions, ToolSpec
from jarvisd._runcontext import RunContext
from jarvisd.engines import Engine, ScriptedEngine, reply
from jarvisd.engines._base import DEFAULT_OPTIONS
from jarvisd.external import BUILTIN, installed
from jarvisd.runs import AgentSpec, RunOutcome, run_spec
from tests.conftest import require

from .conftest import MARKER
from .test_sandboxed import IMAGE, _containers, _docker_ok

pytestmark = pytest.mark.slow

#: The agents' tools that need the network (opencode, claude, gemini).
WEB_TOOLS = {"webfetch", "websearch", "codesearch", "WebFetch", "WebSearch", "web_fetch",
             "google_web_search"}  # fmt: skip


@pytest.fixture(autouse=True)
def real_agents_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agents' npm trees where setup.sh --test installed them (the suite's own
    cache dir is a fresh temporary one)."""
    monkeypatch.setenv(
        "JARVIS_AGENTS_DIR",
        os.environ.get("JARVIS_TEST_AGENTS_DIR") or os.path.expanduser("~/.cache/jarvis/agents"),
    )


def _ready(name: str) -> None:
    require(_docker_ok(), "needs a container engine (DOCKER_HOST)")
    require(installed(BUILTIN[name]), f"needs `jarvis agents install {name}`")


def _config(workspace: Path, **permissions: str) -> Config:
    os.chmod(workspace, 0o777)  # the sandbox user works in it
    return parse_config({
        "sandbox": {"image": IMAGE, "allowed_roots": [f"{workspace.parent}:rw"]},
        "agents": {"permissions": permissions},
    })  # fmt: skip


def _read_call(tools: Sequence[ToolSpec], path: str) -> Generation:
    """A call of whichever tool this agent reads files with."""
    names = {t.name for t in tools}
    if "read" in names:  # opencode
        return reply("", ("read", {"filePath": path}))
    if "exec_command" in names:  # codex
        return reply("", ("exec_command", {"cmd": f"cat {path}"}))
    if "Read" in names:  # claude
        return reply("", ("Read", {"file_path": path}))
    if "read_file" in names:  # gemini
        return reply("", ("read_file", {"file_path": path}))
    raise AssertionError(f"no file-reading tool among {sorted(names)}")


def _write_call(tools: Sequence[ToolSpec], path: str) -> Generation:
    names = {t.name for t in tools}
    if "write" in names:  # opencode
        return reply("", ("write", {"filePath": path, "content": "written\n"}))
    raise AssertionError(f"no file-writing tool among {sorted(names)}")


def _agent_script(first: str, path: str) -> ScriptedEngine:
    """Calls without tools (titles, summaries) get a title; the first turn with tools
    calls ``first`` (read or write); once a tool result is back, the answer quotes it."""

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if not tools:
            return reply("Reading the marker")
        if messages[-1].role == "tool":
            return reply(f"Done: {messages[-1].content.strip()[:400]}")
        return (_read_call if first == "read" else _write_call)(tools, path)

    return ScriptedEngine(fallback=answer)


def _run(
    spec: AgentSpec, config: Config, engine: Engine, run: RunContext | None = None
) -> tuple[RunOutcome, list[Event]]:
    run = run or RunContext()
    events: list[Event] = []
    run.bus.subscribe(events.append)
    return asyncio.run(run_spec(spec, run, config, engine, trace=False)), events


@pytest.mark.parametrize("name", ["opencode", "codex", "claude", "gemini"])
def test_a_tool_call_its_result_and_the_answer(name: str, workspace: Path) -> None:
    _ready(name)
    before = set(_containers())
    engine = _agent_script("read", str(workspace / "README.md"))
    spec = AgentSpec(input="What is the marker in README.md?", agent=name,
                     options={"workspace": str(workspace)}, max_wall=240)  # fmt: skip
    outcome, events = _run(spec, _config(workspace), engine)
    assert outcome.ok, outcome.failure
    assert outcome.metadata["sandboxed"] is True
    assert MARKER in outcome.answer  # the answer quotes the tool's result
    tools = [c for c in engine.calls if c.tools]
    assert len(tools) >= 2  # the call, then the answer after its result
    # No egress: nothing that needs the network, nor a word that it is there
    # (test_offline_prompt.py).
    told = " ".join(str(m.content) for c in tools for m in c.messages)
    assert not WEB_TOOLS & {t.name for c in tools for t in c.tools}
    assert "Network access is enabled" not in told
    if name == "codex":
        assert "no network access" in told
    assert any(MARKER in str(m.content) for m in tools[-1].messages if m.role == "tool")
    ended = [e for e in events if e.type.value == "tool_call_end"]
    if name != "gemini":  # gemini reports the result only to the model
        assert any(MARKER in str(e.data["content"]) for e in ended)
    assert any(e.type.value == "inference_start" for e in events)  # through RunEngine
    assert set(_containers()) <= before


def test_opencode_asks_and_the_policy_denies(workspace: Path) -> None:
    _ready("opencode")
    engine = _agent_script("write", str(workspace / "out.txt"))
    spec = AgentSpec(input="Write out.txt", agent="opencode",
                     options={"workspace": str(workspace)}, max_wall=240)  # fmt: skip
    outcome, events = _run(spec, _config(workspace, edit="deny"), engine)
    # opencode ends its turn when a permission is rejected: no answer, no error
    assert outcome.failure is None or outcome.failure.code == "no_answer", outcome.failure
    asked = [e for e in events if e.type.value == "permission"]
    assert asked and asked[0].data["kind"] == "edit" and asked[0].data["allowed"] is False
    assert not (workspace / "out.txt").exists()


def test_opencode_held_to_its_read_tool_shows_the_model_no_other(workspace: Path) -> None:
    _ready("opencode")
    engine = _agent_script("read", str(workspace / "README.md"))
    spec = AgentSpec(input="What is the marker in README.md?", agent="opencode",
                     tools=("read",), options={"workspace": str(workspace)},
                     max_wall=240)  # fmt: skip
    outcome, _ = _run(spec, _config(workspace), engine)
    assert outcome.ok, outcome.failure
    assert MARKER in outcome.answer
    offered = {t.name for c in engine.calls for t in c.tools}
    assert offered == {"read"}


class _Stuck(Engine):
    """Never answers: the agent waits mid-prompt until the run is cancelled."""

    name = "stuck"

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def generate(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = DEFAULT_OPTIONS,
    ) -> Generation:
        self.asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def _homes() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("jarvis-agent-")}


@pytest.mark.parametrize("name", ["opencode", "codex"])
def test_cancel_mid_prompt_leaves_nothing_behind(name: str, workspace: Path) -> None:
    _ready(name)
    before, homes = set(_containers()), _homes()
    config = _config(workspace)
    spec = AgentSpec(input="What is the marker?", agent=name,
                     options={"workspace": str(workspace)}, max_wall=240)  # fmt: skip

    async def go() -> RunOutcome:
        engine, run = _Stuck(), RunContext()
        task = asyncio.ensure_future(run_spec(spec, run, config, engine, trace=False))
        await asyncio.wait_for(engine.asked.wait(), 200)
        run.cancel.cancel("stopped by the test")
        return await asyncio.wait_for(task, 60)

    outcome = asyncio.run(go())
    assert outcome.failure is not None and outcome.failure.code == "cancelled"
    assert set(_containers()) <= before  # the container is gone
    assert _homes() <= homes  # its home, and the gateway's socket in it, too
