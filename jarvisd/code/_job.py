"""Running an agent on a workspace: the test command before, the agent, the test
command after, and the change recorded.

It is what ``run_spec`` does for a spec with a ``workspace``, so ``jarvis code`` runs
the same way in process and as a jarvisd task (events, cancel, kill -9 recovery). The
agent runs sandboxed with the workspace mounted read-write (naming the project was the
consent: the workspace is added to this run's allowed roots, nothing else is) and the
network off. The test command runs in the sandbox too, with the workspace read-only,
so what it leaves behind cannot become part of the change. A run interrupted by a
crash resumes from the phase it got to, on the workspace as it is (``_resume``): the
daemon resumes its task, and ``jarvis code resume ID`` one that it did not.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import JarvisError, NoChange, TestsCouldNotRun, UsageError, WorkspaceError
from .._events import EventBus, EventType
from .._messages import Usage
from .._runcontext import Budget, Cancelled, RunContext
from ..runs._outcome import Failure, RunOutcome
from ._prompt import asks_no_change, claims_change, round_prompt, task_prompt
from ._record import Limits
from ._resume import RESUMED_NOTE, Phases, Progress, check_resumable, paused, test_of
from ._runenv import _check_image, _reachable_under_bwrap, _setup
from ._store import CodeStore, Workspace, this_process
from ._testrun import TestRun, run_test
from ._workspace import Change, remove_git_entries, snapshot

if TYPE_CHECKING:
    from .._config import Config
    from ..engines import Engine
    from ..executors import CodeExecutor
    from ..runs import AgentSpec
    from ._image import ImageChoice

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_AGENT", "DEFAULT_ROUNDS", "NOT_RESUMABLE", "TestRun", "run_code", "task_prompt"]

DEFAULT_AGENT = "native_openhands"
#: The default most agent rounds of ``jarvis code run --test`` (``--rounds``).
DEFAULT_ROUNDS = 3
#: The most of a round's test output kept in its record (its tail).
_ROUND_OUTPUT = 2000
#: The test runner under its old name.
_run_test = run_test
#: Why a code run stopped by a tool call in flight is not resumed (kept for callers).
NOT_RESUMABLE = (
    "a jarvis code run stopped during a tool call is not resumed: its effect is unverified "
    "(its workspace is kept: show it, discard it, or run the task again on a new one)"
)
#: Room above the workspace's own file count for what the agent adds, in the mount scan.
_SCAN_MARGIN = 20_000
#: The ACP tool kinds that change files, allowed in a jarvis code run.
_EDIT_KINDS = ("edit", "delete", "move")


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


#: The most characters of a CodeAct cell's output the model is shown in a code run.
CODE_OUTPUT_CHARS = 4000


def _agent_options(spec: AgentSpec, config: Config, ws: Workspace) -> dict[str, object]:
    """``spec``'s options, with the workspace as the agent's own when it takes one (an
    external agent: its cwd and the root of its file requests), and CodeAct asked to
    act when it claims a change it did not make."""
    from ..runs import validate_spec
    from ..runs._options import declared_options

    options = dict(spec.options)
    declared = declared_options(validate_spec(spec, config))
    if "reask_unacted" in declared:
        # A CodeAct reply that claims a change when no code ran is asked once to act.
        options.setdefault("reask_unacted", True)
    if "work_dir" in declared:
        # CodeAct's session starts in the workspace; relative file names resolve there.
        options.setdefault("work_dir", ws.path)
    if "max_output_chars" in declared:
        # What a cell prints is read by the model at its next reply: view() of a whole
        # long module printed 10,000 characters, about 3,000 tokens, minutes of a 1.5B
        # model's time on a shared CPU (semver's two replies read 13,000 prompt tokens).
        options.setdefault("max_output_chars", CODE_OUTPUT_CHARS)
    if "workspace" not in declared:
        return options
    given = options.get("workspace")
    if given is not None and given != ws.path:
        raise UsageError("jarvis code sets the agent's workspace itself: give no workspace option")
    options["workspace"] = ws.path
    return options


def _declared(spec: AgentSpec, config: Config) -> Mapping[str, Any]:
    """The options ``spec``'s agent declares."""
    from ..runs import validate_spec
    from ..runs._options import declared_options

    return declared_options(validate_spec(spec, config))


async def _test(
    executor: CodeExecutor, ws: Workspace, run: RunContext, limit_s: float
) -> TestRun | None:
    """The test command's run, unless the run is cancelled first (it is then stopped:
    its container goes with it)."""
    import asyncio

    if not ws.test or run.cancel.cancelled:
        return None
    task = asyncio.ensure_future(run_test(executor, ws, limit_s))

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
        try:
            lead = store.get(spec.workspace or "")
        except JarvisError as exc:
            return RunOutcome(agent=spec.agent, failure=Failure.of(exc))
        if lead.members:
            return await _run_group(spec, run, config, engine, store, lead, started)
        if run.resume is not None and lead.state in ("done", "failed"):
            # Resumed by the daemon after the run ended, before its end was stored.
            return await _finished(lead, spec)
        return await _guarded(spec, run, config, engine, store, started)
    finally:
        store.close()


async def _guarded(
    spec: AgentSpec,
    run: RunContext,
    config: Config,
    engine: Engine | None,
    store: CodeStore,
    started: float,
) -> RunOutcome:
    try:
        return await _run_code(spec, run, config, engine, store, started)
    except (JarvisError, Cancelled) as exc:
        failure = Failure.of(exc)
    except Exception as exc:  # as run_spec: a run that failed is an outcome, never a raise
        log.exception("the jarvis code run failed")
        failure = Failure.of(exc)
    return RunOutcome(
        agent=spec.agent, failure=failure, duration_s=round(time.perf_counter() - started, 3)
    )


async def _run_group(
    spec: AgentSpec,
    run: RunContext,
    config: Config,
    engine: Engine | None,
    store: CodeStore,
    lead: Workspace,
    started: float,
) -> RunOutcome:
    """Run every candidate of ``lead``'s group at once, in one run context (one budget,
    one cancel); the outcome is the best candidate's, with the ranking."""
    import asyncio

    from ._candidates import group_of, rank

    members = group_of(store, lead)
    outcomes = await asyncio.gather(
        *(
            _finished(ws, spec)
            if ws.state in ("done", "failed")  # resumed: a candidate that ended stays so
            else _guarded(
                dataclasses.replace(spec, workspace=ws.id, agent=ws.agent or spec.agent),
                run,
                config,
                engine,
                store,
                started,
            )
            for ws in members
        )
    )
    ranking = rank([store.get(ws.id) for ws in members])
    best = ranking[0]
    outcome = outcomes[[ws.candidate for ws in members].index(best.candidate)]
    usage = outcomes[0].usage
    for other in outcomes[1:]:
        usage = usage + other.usage
    code = dict(outcome.metadata.get("code") or {})
    code.update(candidates=[r.to_dict() for r in ranking], best=best.candidate, group=lead.id)
    return dataclasses.replace(
        outcome,
        turns=sum(o.turns for o in outcomes),
        usage=usage,
        metadata={**dict(outcome.metadata), "code": code},
        duration_s=round(time.perf_counter() - started, 3),
    )


async def _finished(ws: Workspace, spec: AgentSpec) -> RunOutcome:
    """The outcome of a candidate whose run ended before the group's was resumed, from
    its record."""
    record = ws.outcome
    failure = record.get("failure")
    return RunOutcome(
        agent=ws.agent or spec.agent,
        answer=str(record.get("summary") or ""),
        metadata={"code": _summary(ws)},
        failure=None
        if not isinstance(failure, Mapping)
        else Failure(str(failure.get("code") or "internal"), str(failure.get("message") or "")),
    )


@dataclasses.dataclass
class _Progress:
    """What a code run got to, kept as it goes: its record is written from it whatever
    stopped the run."""

    image: dict[str, Any]
    outcome: RunOutcome | None = None
    before: TestRun | None = None
    after: TestRun | None = None
    rounds: list[dict[str, object]] = dataclasses.field(default_factory=list)
    setup: dict[str, Any] = dataclasses.field(default_factory=dict)


async def _run_code(
    spec: AgentSpec,
    run: RunContext,
    config: Config,
    engine: Engine | None,
    store: CodeStore,
    started: float,
) -> RunOutcome:
    from ..sandbox import executor_for_backend

    ws, progress = _ready_workspace(store, spec, config)
    choice = _image_choice(ws, config)
    if config.sandbox.backend == "bwrap":
        _reachable_under_bwrap(ws.path, config)
    code_config = _code_config(config, ws)
    if choice.own:
        code_config = dataclasses.replace(
            code_config, sandbox=dataclasses.replace(code_config.sandbox, image=choice.image)
        )
    inner = dataclasses.replace(
        spec,
        workspace=None,
        input=task_prompt(ws, spec.input),
        agent=spec.agent or DEFAULT_AGENT,
        isolation="sandbox",
        mounts=(f"{ws.path}:rw",),
    )
    # Checked before the workspace is taken: a refused spec leaves it ready.
    inner = dataclasses.replace(inner, options=_agent_options(inner, code_config, ws))
    ws = store.update(ws, state="running", runner=this_process(), run_id=run.run_id or ws.run_id)
    phases = Phases(store, ws, run, progress)
    phases.save()  # the daemon may resume the run from here on
    executor = executor_for_backend(config.sandbox.backend, code_config)
    done = _Progress(
        image={"image": choice.image, "origin": choice.origin, "notes": list(choice.notes)}
    )
    try:
        await _check_image(run, executor, choice, done.image)
        executor = await _setup(ws, run, code_config, executor, done.setup)
        await _rounds(spec, inner, phases, run, code_config, engine, executor, done, config)
    finally:
        close = getattr(executor, "close", None)
        if close is not None:
            close()
        if not paused(run):  # a daemon shutdown leaves the run to be resumed
            ws, problem, dishonest = _record(store, phases.ws, spec, run, config, done)
    if paused(run):
        return RunOutcome(agent=spec.agent, failure=Failure("cancelled", run.cancel.reason))
    outcome = done.outcome
    assert outcome is not None  # the rounds ran (or their error went up)
    metadata = {**dict(outcome.metadata), "code": _summary(ws)}
    if problem is not None and outcome.failure is None:
        outcome = dataclasses.replace(outcome, failure=Failure.of(problem))
    elif dishonest is not None:
        outcome = dataclasses.replace(outcome, failure=Failure.of(dishonest))
    return dataclasses.replace(
        outcome, metadata=metadata, duration_s=round(time.perf_counter() - started, 3)
    )


def _ready_workspace(
    store: CodeStore, spec: AgentSpec, config: Config
) -> tuple[Workspace, Progress]:
    """The spec's workspace and where its run starts: from the beginning on a ready
    one, from its progress on one whose run was interrupted (a resume); refused
    otherwise."""
    ws = store.get(spec.workspace or "")
    if ws.state == "ready":
        progress = Progress(spec=spec.to_dict())
    elif ws.state == "running" and ws.shown_state == "interrupted":
        progress = check_resumable(ws)
        progress.resumed += 1
        progress.open_calls = []
    else:
        raise WorkspaceError(
            f"workspace {ws.id} has run already ({ws.shown_state}): each workspace runs one task"
        )
    if config.sandbox.backend == "none":
        raise UsageError(
            'jarvis code runs the agent in the sandbox: it needs sandbox.backend = "docker", '
            '"podman" or "bwrap" (it is "none")'
        )
    if not Path(ws.path).is_dir():
        raise WorkspaceError(f"workspace {ws.id} is gone from {ws.path}")
    return ws, progress


def _image_choice(ws: Workspace, config: Config) -> ImageChoice:
    """The image the run's sandbox uses; one named for a backend that runs no image is
    refused when given for this run, else noted and ignored."""
    from ._image import ImageChoice, choose_image

    choice = choose_image(ws.path, config, ws.image)
    if choice.own and config.sandbox.backend not in ("docker", "podman"):
        backend = config.sandbox.backend
        if choice.origin in ("--image", "[code] image"):
            raise UsageError(
                f"the image {choice.image} ({choice.origin}) needs a container backend: "
                f'sandbox.backend is "{backend}" (give an image only with docker or podman)'
            )
        note = f"{choice.origin} names image {choice.image}: ignored ({backend} runs no image)"
        choice = ImageChoice(config.sandbox.image, "sandbox.image", (*choice.notes, note))
    return choice


async def _rounds(
    spec: AgentSpec,
    inner: AgentSpec,
    phases: Phases,
    run: RunContext,
    code_config: Config,
    engine: Engine | None,
    executor: CodeExecutor,
    done: _Progress,
    config: Config,
) -> None:
    """The test command before, then the agent's rounds, each followed by the test
    command, while :func:`_go_on` says so; recorded in ``done`` as they go, and each
    phase in ``phases`` as it ends (a resumed run skips those that ended)."""
    ws, p = phases.ws, phases.progress
    timeout = config.sandbox.timeout
    if p.before_done:
        done.before = before = test_of(p.before)
    else:
        done.before = before = await _test(executor, ws, run, timeout)
        _hold_if_paused(run)
        phases.save(before_done=True, before=None if before is None else before.to_dict())
    # CodeAct with its file helpers is told how to change a file with them.
    declared = _declared(inner, code_config)
    helpers = bool(inner.options.get("file_helpers", "file_helpers" in declared))
    done.rounds = list(p.rounds)
    while True:
        number = p.number
        if p.outcome is None:
            ran = await _agent_round(spec, inner, phases, run, code_config, engine, helpers)
            _hold_if_paused(run)
            usage = ran.usage if p.usage is None else Usage.from_dict(p.usage) + ran.usage
            total = dataclasses.replace(ran, turns=p.turns + ran.turns, usage=usage)
            phases.save(
                outcome=json.loads(json.dumps(total.to_dict(), default=str)),
                own_turns=ran.turns,
                turns=total.turns,
                usage=usage.to_dict(),
                started=False,
                inner=None,
            )
        # else this round's agent ended before the run stopped: its outcome stands
        assert p.outcome is not None
        done.outcome = outcome = RunOutcome.from_dict(p.outcome)
        done.after = after = await _test(executor, ws, run, timeout) if outcome.ok else None
        _hold_if_paused(run)
        own = dataclasses.replace(outcome, turns=p.own_turns)
        done.rounds.append(_round(run, ws, number, own, after))
        go_on = after is not None and _go_on(before, after, number, ws.rounds, run)
        if not go_on:
            phases.save(rounds=list(done.rounds), done=True)
            break
        assert after is not None
        prompt = round_prompt(
            ws,
            spec.input,
            after,
            outcome.answer,
            number + 1,
            ws.rounds,
            helpers=helpers,
            acted=bool(outcome.tool_results),
        )
        phases.save(rounds=list(done.rounds), number=number + 1, outcome=None, prompt=prompt)


def _hold_if_paused(run: RunContext) -> None:
    """Stop here, recording nothing more, when a daemon shutdown stopped the run: what
    the phase under way did is not its outcome (the task resumes it at the next start)."""
    if paused(run):
        raise run.cancel.error()


async def _agent_round(
    spec: AgentSpec,
    inner: AgentSpec,
    phases: Phases,
    run: RunContext,
    code_config: Config,
    engine: Engine | None,
    helpers: bool,
) -> RunOutcome:
    """Round ``phases.progress.number``'s agent run. A round whose agent was running
    when the run stopped starts again on the workspace as it is, the agent told so
    (or goes on from the inner agent's own checkpoint, when it left one it can resume
    from)."""
    from ..runs._execute import run_spec

    p = phases.progress
    resume: Mapping[str, Any] | None = None
    prompt = p.prompt or task_prompt(phases.ws, spec.input, test_of(p.before), helpers=helpers)
    if p.started and p.inner is not None and p.inner.get("resumable") is not False:
        resume = p.inner
    elif p.started:
        prompt = f"{prompt}\n\n{RESUMED_NOTE}"
    phases.save(prompt=p.prompt or prompt, started=True)
    # The inner agent checkpoints into the round's record, never over the code run's
    # (which the daemon resumes), and resumes only from its own.
    # The round's events go on a bus of its own, relayed to the run's: candidates share
    # one run, and each workspace's record must see only its own agent's tool calls
    # (another candidate's call left open in it would make its resume refuse).
    bus = EventBus()
    bus.subscribe(run.bus.deliver)
    bus.subscribe(phases.on_tool_event, EventType.TOOL_CALL_START)
    bus.subscribe(phases.on_tool_event, EventType.TOOL_CALL_END)
    inner_run = dataclasses.replace(  # as patterns' members: engines bound to its bus
        run, bus=bus, bound_engines={}, checkpoint=phases.inner_checkpoint, resume=resume
    )
    return await run_spec(dataclasses.replace(inner, input=prompt), inner_run, code_config, engine)


def _record(
    store: CodeStore,
    ws: Workspace,
    spec: AgentSpec,
    run: RunContext,
    config: Config,
    done: _Progress,
) -> tuple[Workspace, JarvisError | None, JarvisError | None]:
    """The run's change snapshotted and its record written to the workspace, whatever
    stopped the run; with the change's problem and the answer's dishonesty, if any."""
    outcome, before, after = done.outcome, done.before, done.after
    setup, image = done.setup, done.image
    change, problem = _snapshot(ws, config)
    failure = None if outcome is None else outcome.failure
    record: dict[str, object] = {
        "summary": "" if outcome is None else outcome.answer,
        "result": change.result,
        "changed": change.changed,
        "files": [{"status": s, "path": p} for s, p in change.files],
        "diff": change.diff,
        "diff_truncated": change.diff_truncated,
        "test_before": None if before is None else before.to_dict(),
        "test_after": None if after is None else after.to_dict(),
        "rounds": done.rounds,
        "no_change_claimed": False,
        "failure": None if failure is None else failure.to_dict(),
        "setup": setup or None,
        "image": image,
    }
    if image.get("failure"):
        record["failure"] = image["failure"]
    elif setup.get("failure"):
        record["failure"] = setup["failure"]
    elif outcome is None:
        record["failure"] = {
            "code": "cancelled" if run.cancel.cancelled else "internal",
            "message": run.cancel.reason or "the run stopped",
        }
    if problem is not None:
        record["failure"] = Failure.of(problem).to_dict()
    dishonest = None
    if outcome is not None and outcome.ok and problem is None:
        dishonest = _held_to_account(spec.input, outcome.answer, change, before, after)
        if dishonest is not None:
            record["failure"] = Failure.of(dishonest).to_dict()
            record["no_change_claimed"] = isinstance(dishonest, NoChange)
    ok = outcome is not None and outcome.ok and problem is None
    state = "done" if ok and not isinstance(dishonest, NoChange) else "failed"
    return store.update(ws, state=state, outcome=record), problem, dishonest


def _round(
    run: RunContext, ws: Workspace, number: int, outcome: RunOutcome, test: TestRun | None
) -> dict[str, object]:
    """Round ``number``'s record (its test output's tail only: the last is kept whole in
    ``test_after``), published as a ``round`` event."""
    rounds = ws.rounds
    record: dict[str, object] = {
        "round": number,
        "of": rounds,
        "turns": outcome.turns,
        "failure": None if outcome.failure is None else outcome.failure.to_dict(),
        "summary": outcome.answer[-1000:],
        "test": None
        if test is None
        else {**test.to_dict(), "output": test.output[-_ROUND_OUTPUT:]},
    }
    verdict = "" if test is None else test.verdict
    extra = {"candidate": ws.candidate} if ws.candidate else {}
    run.bus.publish(
        EventType.ROUND,
        pattern="code",
        depth=run.depth,
        round=number,
        of=rounds,
        test=verdict,
        exit_code=None if test is None else test.exit_code,
        error="" if test is None else test.error,
        **extra,
    )
    return record


def _budget_left(budget: Budget) -> bool:
    if budget.max_wall is not None and budget.elapsed() >= budget.max_wall:
        return False
    if budget.max_calls is not None and budget.calls >= budget.max_calls:
        return False
    return budget.max_tokens is None or budget.used.total_tokens < budget.max_tokens


def _go_on(
    before: TestRun | None, after: TestRun | None, number: int, rounds: int, run: RunContext
) -> bool:
    """Whether the agent gets another round: it said it was done, the tests still do
    not pass, they could run before it started (else no change of code makes them
    run), and rounds and budget are left."""
    if after is None or after.passed or (before is not None and before.could_not_run):
        return False
    return number < rounds and not run.cancel.cancelled and _budget_left(run.budget)


def _held_to_account(
    task: str, summary: str, change: Change, before: TestRun | None, after: TestRun | None
) -> JarvisError | None:
    """The failure of a run whose agent finished, when its result is not what it says:
    a summary that claims a change with an empty diff (unless the task asked for none),
    or a test command that could not run the tests."""
    if not change.changed and claims_change(summary) and not asks_no_change(task):
        return NoChange(
            "the agent's summary claims a change, but it changed no file (the diff is empty)"
        )
    last = after if after is not None else before
    if last is not None and last.could_not_run:
        return TestsCouldNotRun(f"the test command could not run the tests: {last.error}")
    return None


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


def _summary(ws: Workspace) -> Mapping[str, object]:
    """What a run's outcome says of the workspace (the diff itself is in the store)."""
    outcome = ws.outcome
    return {
        "workspace": ws.id,
        "path": ws.path,
        "source": ws.source,
        "branch": ws.branch,
        "changed": outcome.get("changed"),
        "files": outcome.get("files"),
        "left_out": [dict(x) for x in ws.left_out],
        "more_left_out": ws.more_left_out,
        "test_before": outcome.get("test_before"),
        "test_after": outcome.get("test_after"),
        "rounds": len(outcome.get("rounds") or ()),
        "setup": outcome.get("setup"),
        "image": outcome.get("image"),
    }


def workspace_of(outcome: RunOutcome) -> str:
    code = outcome.metadata.get("code")
    return str(code.get("workspace") or "") if isinstance(code, Mapping) else ""
