"""Running an agent on a workspace: the test command before, the agent, the test
command after, and the change recorded.

It is what ``run_spec`` does for a spec with a ``workspace``, so ``jarvis code`` runs
the same way in process and as a jarvisd task (events, cancel, kill -9 recovery). The
agent runs sandboxed with the workspace mounted read-write (naming the project was the
consent: the workspace is added to this run's allowed roots, nothing else is) and the
network off. The test command runs in the sandbox too, with the workspace read-only,
so what it leaves behind cannot become part of the change. Such a run cannot be
resumed after a crash: it says so in a checkpoint, and the daemon marks it interrupted.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import JarvisError, UsageError, WorkspaceError
from .._run import Cancelled, RunContext
from ..runs._outcome import Failure, RunOutcome
from ._record import Limits
from ._store import CodeStore, Workspace, this_process
from ._workspace import Change, remove_bytecode, remove_git_entries, snapshot

if TYPE_CHECKING:
    from .._config import Config
    from ..engines import Engine
    from ..executors import CodeExecutor
    from ..runs import AgentSpec

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_AGENT", "NOT_RESUMABLE", "TestRun", "run_code", "task_prompt"]

DEFAULT_AGENT = "native_openhands"
#: The most of a test command's output kept (its tail: where failures are reported).
MAX_TEST_OUTPUT = 8000
NOT_RESUMABLE = (
    "a jarvis code run is not resumed after a crash (its workspace is kept: show it, "
    "discard it, or run the task again on a new one)"
)
#: Room above the workspace's own file count for what the agent adds, in the mount scan.
_SCAN_MARGIN = 20_000
#: The ACP tool kinds that change files, allowed in a jarvis code run.
_EDIT_KINDS = ("edit", "delete", "move")


@dataclass(frozen=True, slots=True)
class TestRun:
    """The test command's result, in the sandbox."""

    command: str
    exit_code: int
    output: str
    duration_s: float
    reason: str = ""  # "timeout", "oom", ... or ""

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.reason

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.command, "exit_code": self.exit_code, "passed": self.passed,
                "reason": self.reason, "duration_s": self.duration_s, "output": self.output}  # fmt: skip


def task_prompt(ws: Workspace, task: str) -> str:
    """The agent's input: where the project is, the task, and what to answer."""
    lines = [
        f"You are working on a software project whose files are in the directory {ws.path} "
        "(a working copy: change the files there; your changes are reviewed before they "
        "reach the project). Use absolute paths under that directory.",
    ]
    if ws.test:
        lines.append(f"The project's tests run with: cd {ws.path} && {ws.test}")
    lines += [f"Task: {task}", "When you are done, reply with a short summary of what you changed."]
    return "\n\n".join(lines)


def _code_config(config: Config, ws: Workspace) -> Config:
    """``config`` with the workspace as the one extra allowed root (read-write), a
    mount scan large enough for it, and an external agent's edits allowed whatever
    ``[agents.permissions]`` says: it can only change files in the container, and of
    the host's only the workspace, whose change is reviewed before it is applied."""
    sandbox = config.sandbox
    entries = max(sandbox.max_mount_entries, ws.files + _SCAN_MARGIN)
    roots = (*sandbox.allowed_roots, f"{ws.path}:rw")
    changed = dataclasses.replace(sandbox, allowed_roots=roots, max_mount_entries=entries)
    permissions = dict(config.agents.permissions)
    for kind in _EDIT_KINDS:
        permissions[kind] = "allow"
    agents = dataclasses.replace(config.agents, permissions=permissions)
    return dataclasses.replace(config, sandbox=changed, agents=agents)


def _agent_options(spec: AgentSpec, config: Config, ws: Workspace) -> dict[str, object]:
    """``spec``'s options, with the workspace as the agent's own when it takes one (an
    external agent: its cwd and the root of its file requests)."""
    from ..runs import validate_spec
    from ..runs._options import declared_options

    options = dict(spec.options)
    if "workspace" not in declared_options(validate_spec(spec, config)):
        return options
    given = options.get("workspace")
    if given is not None and given != ws.path:
        raise UsageError("jarvis code sets the agent's workspace itself: give no workspace option")
    options["workspace"] = ws.path
    return options


async def _run_test(executor: CodeExecutor, ws: Workspace, limit_s: float) -> TestRun:
    from ..executors import ExecRequest, run_to_completion

    argv = ["/bin/sh", "-c", 'cd "$1" && exec /bin/sh -c "$2"', "sh", ws.path, ws.test]
    # Compiled Python is never part of a change, so never reviewed: what the agent left
    # there must not stand in for the source the test imports (the workspace is a copy).
    remove_bytecode(Path(ws.path))
    request = ExecRequest(argv=argv, timeout=limit_s, mounts=(ws.path,),
                          env={"PYTHONDONTWRITEBYTECODE": "1"})  # fmt: skip
    started = time.perf_counter()
    result = await run_to_completion(executor, request)
    output = (result.stdout + result.stderr)[-MAX_TEST_OUTPUT:]
    return TestRun(ws.test, result.exit_code, output, round(time.perf_counter() - started, 3),
                   result.reason)  # fmt: skip


async def _test(
    executor: CodeExecutor, ws: Workspace, run: RunContext, limit_s: float
) -> TestRun | None:
    """The test command's run, unless the run is cancelled first (it is then stopped:
    its container goes with it)."""
    import asyncio

    if not ws.test or run.cancel.cancelled:
        return None
    task = asyncio.ensure_future(_run_test(executor, ws, limit_s))

    def stop_test() -> None:
        task.cancel()

    stop = run.cancel.on_cancel(stop_test)
    try:
        return await task
    except asyncio.CancelledError:
        if not task.cancelled() or asyncio.current_task().cancelling():  # type: ignore[union-attr]
            raise
        return None  # stopped by the run's cancel
    finally:
        stop()


async def run_code(
    spec: AgentSpec, run: RunContext, config: Config, engine: Engine | None = None
) -> RunOutcome:
    """Run ``spec``'s agent on workspace ``spec.workspace`` to its outcome (never raises
    for a run that failed). The outcome's ``metadata["code"]`` holds the change."""
    from .._paths import paths

    started = time.perf_counter()
    store = CodeStore(paths().state / "code.db")
    try:
        return await _run_code(spec, run, config, engine, store, started)
    except (JarvisError, Cancelled) as exc:
        failure = Failure.of(exc)
    except Exception as exc:  # as run_spec: a run that failed is an outcome, never a raise
        log.exception("the jarvis code run failed")
        failure = Failure.of(exc)
    finally:
        store.close()
    return RunOutcome(agent=spec.agent, failure=failure,
                      duration_s=round(time.perf_counter() - started, 3))  # fmt: skip


async def _run_code(
    spec: AgentSpec,
    run: RunContext,
    config: Config,
    engine: Engine | None,
    store: CodeStore,
    started: float,
) -> RunOutcome:
    from ..runs._execute import run_spec
    from ..sandbox import executor_for_backend

    ws = store.get(spec.workspace or "")
    if ws.state != "ready":
        raise WorkspaceError(
            f"workspace {ws.id} has run already ({ws.state}): each workspace runs one task"
        )
    if config.sandbox.backend == "none":
        raise UsageError(
            'jarvis code runs the agent in the sandbox: it needs sandbox.backend = "docker", '
            '"podman" or "bwrap" (it is "none")'
        )
    if not Path(ws.path).is_dir():  # noqa: ASYNC240 - one stat
        raise WorkspaceError(f"workspace {ws.id} is gone from {ws.path}")
    if run.checkpoint is not None:
        run.checkpoint({"agent": "code", "resumable": False, "reason": NOT_RESUMABLE})
    code_config = _code_config(config, ws)
    inner = dataclasses.replace(
        spec, workspace=None, input=task_prompt(ws, spec.input),
        agent=spec.agent or DEFAULT_AGENT, sandbox=True, mounts=(f"{ws.path}:rw",),
    )  # fmt: skip
    # Checked before the workspace is taken: a refused spec leaves it ready.
    inner = dataclasses.replace(inner, options=_agent_options(inner, code_config, ws))
    ws = store.update(ws, state="running", runner=this_process(), run_id=run.run_id)
    executor = executor_for_backend(config.sandbox.backend, code_config)
    timeout = config.sandbox.timeout
    outcome: RunOutcome | None = None
    before = after = None
    setup: dict[str, Any] = {}
    try:
        executor = await _setup(ws, run, code_config, executor, setup)
        before = await _test(executor, ws, run, timeout)
        outcome = await run_spec(inner, run, code_config, engine)
        if outcome.ok:
            after = await _test(executor, ws, run, timeout)
    finally:
        close = getattr(executor, "close", None)
        if close is not None:
            close()
        change, problem = _snapshot(ws, config)
        failure = None if outcome is None else outcome.failure
        record: dict[str, Any] = {
            "summary": "" if outcome is None else outcome.answer,
            "result": change.result,
            "changed": change.changed,
            "files": [{"status": s, "path": p} for s, p in change.files],
            "diff": change.diff,
            "diff_truncated": change.diff_truncated,
            "test_before": None if before is None else before.to_dict(),
            "test_after": None if after is None else after.to_dict(),
            "failure": None if failure is None else failure.to_dict(),
            "setup": setup or None,
        }
        if setup.get("failure"):
            record["failure"] = setup["failure"]
        elif outcome is None:
            record["failure"] = {"code": "cancelled" if run.cancel.cancelled else "internal",
                                 "message": run.cancel.reason or "the run stopped"}  # fmt: skip
        if problem is not None:
            record["failure"] = Failure.of(problem).to_dict()
        state = "done" if outcome is not None and outcome.ok and problem is None else "failed"
        ws = store.update(ws, state=state, outcome=record)
    metadata = {**dict(outcome.metadata), "code": _summary(ws)}
    if problem is not None and outcome.failure is None:
        outcome = dataclasses.replace(outcome, failure=Failure.of(problem))
    return dataclasses.replace(
        outcome, metadata=metadata, duration_s=round(time.perf_counter() - started, 3)
    )


async def _setup(
    ws: Workspace, run: RunContext, config: Config, executor: CodeExecutor, record: dict[str, Any]
) -> CodeExecutor:
    """The run's toolchain (``jarvisd.code._setup``), when it has a setup: the executor
    the test command then runs on (and, on the run's context, what the agent's sandbox
    gets); ``record`` gets what the outcome says of it, its failure too before
    SetupFailed is raised."""
    from .._errors import SetupFailed
    from .._events import EventType
    from ._setup import plan_setup, prepare_toolchain, run_env, with_toolchain

    plan = plan_setup(ws.path, ws.setup or config.code.setup, enabled=not ws.no_setup)
    if plan is None or run.cancel.cancelled:
        return executor

    def say(line: str) -> None:
        run.bus.publish(EventType.CODE_SETUP, line=line)

    record["files"] = list(plan.files)
    record["command"] = plan.command or plan.pip_line
    try:
        toolchain = await prepare_toolchain(plan, ws.path, config, executor, say)
    except SetupFailed as exc:
        record["failure"] = Failure.of(exc).to_dict()
        raise
    record.update(toolchain.to_dict())
    run.sandbox_binds = (*run.sandbox_binds, *toolchain.binds())
    agent_env = {k: v for k, v in run_env(ws.path).items() if k in ("PATH", "VIRTUAL_ENV")}
    run.sandbox_env = {**run.sandbox_env, **agent_env}
    return with_toolchain(executor, toolchain, ws.path)


def _snapshot(ws: Workspace, config: Config) -> tuple[Change, WorkspaceError | None]:
    """The change (or none, when it is too large to record), and the problem to report,
    if any. Then whatever ``.git`` the agent left in the workspace goes: the path jarvis
    shows must hold no repository of the agent's making (git run there would obey its
    config); one that cannot be removed is reported."""
    limits = Limits(config.code.max_file_bytes, config.code.max_change_bytes)
    try:
        change = snapshot(ws, limits)
        error = None
    except WorkspaceError as exc:
        change, error = Change(ws.base, (), "", False), exc
    kept = remove_git_entries(Path(ws.path))
    if kept and error is None:
        error = WorkspaceError(
            f"the agent left {', '.join(kept[:5])} in workspace {ws.id} and it could not be "
            "removed: do not run git there (review with `jarvis code show`, then discard it)"
        )
    return change, error


def _summary(ws: Workspace) -> Mapping[str, Any]:
    """What a run's outcome says of the workspace (the diff itself is in the store)."""
    outcome = ws.outcome
    return {
        "workspace": ws.id, "path": ws.path, "source": ws.source, "branch": ws.branch,
        "changed": outcome.get("changed"), "files": outcome.get("files"),
        "left_out": [dict(x) for x in ws.left_out], "more_left_out": ws.more_left_out,
        "test_before": outcome.get("test_before"), "test_after": outcome.get("test_after"),
        "setup": outcome.get("setup"),
    }  # fmt: skip


def workspace_of(outcome: RunOutcome) -> str:
    code = outcome.metadata.get("code")
    return str(code.get("workspace") or "") if isinstance(code, Mapping) else ""
