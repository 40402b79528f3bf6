"""CodeAct's persistent session on every backend (docker, bwrap, host process), driven
by a scripted engine: one sandbox per run whose state carries from cell to cell, a cell
past its timeout killed alone, and nothing left behind at the end or on cancel."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from jarvisd._config import Config, SandboxConfig
from jarvisd._runcontext import Cancelled, RunContext
from jarvisd.agents import AgentRegistry
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.executors import CodeExecutor, SubprocessExecutor, executor_for
from jarvisd.sandbox._bwrap import bwrap_path
from tests.agents.test_repl import processes_running, wait_gone
from tests.conftest import require

from .conftest import engine_problem
from .test_escape import our_containers

BACKENDS = [
    pytest.param("docker", marks=pytest.mark.docker),
    "bwrap",
    "none",
]


def executor(backend: str) -> CodeExecutor:
    if backend == "docker":
        problem = engine_problem()
        require(not problem, problem)
    if backend == "bwrap":
        require(
            bwrap_path() is not None, "bubblewrap is not installed (apt-get install bubblewrap)"
        )
    if backend == "none":
        return SubprocessExecutor()
    return executor_for(Config(sandbox=SandboxConfig(backend=backend, memory="256m")))  # type: ignore[arg-type]


def code(src: str) -> Any:
    return reply(f"```python\n{src}\n```")


def codeact(backend: str, replies: list[Any], **kw: Any) -> Any:
    engine = ScriptedEngine(replies)
    return AgentRegistry.create("native_openhands", engine, "scripted", temperature=0,
                                executor=executor(backend), allow_network=False, **kw)  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_variable_set_in_cell_1_is_read_in_cell_3(backend: str) -> None:
    agent = codeact(backend, [
        code("import json\nx = 6 * 7\nn = open('/tmp/note', 'w').write('same sandbox')"),
        code("print('cell 2')"),
        code("print(x, json.dumps([x]), open('/tmp/note').read())"),
        reply("Final Answer: 42"),
    ])  # fmt: skip
    result = asyncio.run(agent.arun("go"))
    assert result.content == "42"
    # /tmp is each sandbox's own tmpfs: the file proves cell 3 ran where cell 1 did.
    assert result.tool_results[2].content.strip() == "42 [42] same sandbox"
    if backend == "docker":
        assert not our_containers()  # removed at the end of the run


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cell_that_times_out_is_killed_and_the_next_cell_runs(backend: str) -> None:
    agent = codeact(backend, [
        code("x = 1"),
        code("x = 2\nwhile True: pass"),
        code("print('next cell sees x =', x)"),
        reply("Final Answer: done"),
    ], exec_timeout=2.0)  # fmt: skip
    result = asyncio.run(agent.arun("go"))
    stopped, after = result.tool_results[1], result.tool_results[2]
    assert "timed out after 2 s" in stopped.content and not stopped.success
    assert after.content.strip() == "next cell sees x = 1"
    assert result.content == "done"


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancel_ends_the_session_and_removes_its_sandbox(backend: str) -> None:
    token = str(uuid.uuid4().int % 10**6 + 10**6)
    agent = codeact(backend, [
        code(f"import subprocess, time\nsubprocess.Popen(['sleep', '{token}'])\ntime.sleep(600)"),
        reply("Final Answer: never"),
    ], exec_timeout=600.0)  # fmt: skip
    run = RunContext()

    async def go() -> None:
        task = asyncio.ensure_future(agent.arun("go", run=run))
        while not processes_running(token):  # the cell is running in its sandbox
            assert not task.done(), task.result()
            await asyncio.sleep(0.1)
        if backend == "docker":
            assert len(our_containers()) == 1
        run.cancel.cancel("stop")
        await task

    with pytest.raises(Cancelled):
        asyncio.run(go())
    assert wait_gone(token) == []
    if backend == "docker":
        assert not our_containers()


def test_a_warm_pool_that_cannot_be_filled_is_only_a_warning(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from jarvisd.executors import ExecRequest
    from jarvisd.sandbox import DockerExecutor

    missing = f"unix://{tmp_path}/no-engine.sock"
    executor = DockerExecutor(Config(sandbox=SandboxConfig(warm_pool=2, docker_host=missing)))
    asyncio.run(executor.prepare(ExecRequest(argv=["python3", "-m", "runners.repl"])))
    assert "warm pool: not filled" in caplog.text and "no-engine.sock" in caplog.text
