"""`jarvis ask` gives the same exit code, stderr line and --json outcome (durations
aside) in process and through a real jarvisd on a real socket, for every way a run
ends: success, usage error, engine unavailable, sandbox unavailable, budget stop and
Ctrl-C. The daemon is started in an environment the caller does not share (no
OLLAMA_HOST of its own): the caller's engine must travel with the question."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from jarvisd._messages import Generation, Message, Role, ToolSpec
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.testing import OllamaStandIn

from .conftest import DaemonProcess, SlowOnCue

pytestmark = pytest.mark.slow


def script(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
    first_user = next((m.content for m in messages if m.role is Role.USER), "")
    if messages[-1].role is Role.TOOL:
        return reply(f"the result is {messages[-1].content}")
    if "calc" in first_user and tools:
        return reply("", ("calculator", {"expression": "6*7"}))
    return reply(f"answer to {first_user}")


@dataclass(frozen=True)
class Ran:
    code: int
    stderr_line: str
    outcome: dict[str, object] | None


@pytest.fixture
def standin() -> Iterator[OllamaStandIn]:
    with OllamaStandIn(SlowOnCue(fallback=script)) as server:
        yield server


@pytest.fixture
def daemon(isolated_dirs: Path, standin: OllamaStandIn) -> Iterator[DaemonProcess]:
    process = DaemonProcess(isolated_dirs, standin.url)
    # No engine host in the config: the caller's OLLAMA_HOST decides. The daemon itself
    # runs with the suite's OLLAMA_HOST, a closed port.
    process.config_file.write_text(
        '[engine]\ndefault = "ollama"\nmodel = "scripted"\n'
        '[sandbox]\nbackend = "docker"\ndocker_host = "unix:///nonexistent/docker.sock"\n'
    )
    process.start()
    yield process
    process.terminate()


def ask(args: list[str], env: dict[str, str], engine: ScriptedEngine | None = None) -> Ran:
    asked = len(engine.calls) if engine is not None else 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "jarvisd", "ask", "--json", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    if engine is not None:  # Ctrl-C once the question reached the engine
        deadline = time.monotonic() + 30
        while len(engine.calls) == asked and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    lines = [line for line in err.splitlines() if line.strip()]
    outcome = json.loads(out) if out.strip() else None
    if isinstance(outcome, dict):
        outcome.pop("duration_s")
        for result in outcome.get("tool_results") or ():
            result.pop("latency_s")
            result.pop("call_id")  # the server names calls at random
    return Ran(proc.returncode, lines[-1] if lines else "", outcome)


CASES = {
    "success": (["hello there"], 0, ""),
    "tools": (["--agent", "orchestrator", "--tools", "calculator", "calc it"], 0, ""),
    "usage": (["--agent", "orchestrator", "--option", "nope=1", "hi"], 2,
              "jarvis: error: agent 'orchestrator' has no option 'nope'"),
    "engine_unavailable": (["hi"], 3, "jarvis: error: cannot reach Ollama"),
    "sandbox_unavailable": (["--sandbox", "hi"], 3, "jarvis: error:"),
    "budget": (["--agent", "orchestrator", "--tools", "calculator", "--max-calls", "1",
                "calc it"], 1, "jarvis: stopped: call budget of 1 engine calls spent"),
    "ctrl_c": (["slow question"], 130, "jarvis: cancelled: interrupted by the user"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_ask_is_the_same_with_and_without_the_daemon(
    case: str, daemon: DaemonProcess, standin: OllamaStandIn
) -> None:
    args, code, line = CASES[case]
    env = dict(os.environ)
    env["OLLAMA_HOST"] = "http://127.0.0.1:9" if case == "engine_unavailable" else standin.url
    engine = standin.engine if case == "ctrl_c" else None
    assert engine is None or isinstance(engine, ScriptedEngine)
    here = ask([*args, "--no-daemon"], env, engine)
    there = ask(args, env, engine)
    assert here.code == code, here
    assert here.stderr_line.startswith(line), here
    assert there == here, daemon.log_text()
    if here.outcome is not None:
        assert here.outcome["failure"] is None if code == 0 else here.outcome["failure"]
