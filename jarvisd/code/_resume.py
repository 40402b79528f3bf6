"""Resuming a ``jarvis code`` run after a crash: the workspace on disk is the state.

A code run goes through phases: the test command before, then rounds (the agent, then
the test command after), then the record. :class:`Phases` writes how far it got to
the workspace's row (``Workspace.progress``, a :class:`Progress`) as each phase ends,
and after each tool call the agent completes, then tells the daemon (a checkpoint), so
that a run the daemon died under resumes instead of being only ``interrupted``:

- a finished phase is not redone (the test before, a round whose agent ended, a
  round's test after);
- a round whose agent was running starts again on the workspace as it is, the agent
  told plainly that it was interrupted and that the files hold what it did so far
  (:data:`RESUMED_NOTE`), unless the inner agent left a checkpoint it can resume from;
- a tool call (a CodeAct cell) in flight when the run stopped is "effect unverified":
  the run is not resumed (the daemon's rule; ``jarvis code resume`` refuses it too).

The daemon's own rule (``daemon/_tasks.py``: no tool call completed after the last
checkpoint) holds because a checkpoint follows every ``tool_call_end`` the agent
reports. The same record serves ``jarvis code resume ID`` in a process of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._errors import WorkspaceError
from .._events import Event, EventType
from ._testrun import TestRun

if TYPE_CHECKING:
    from .._runcontext import RunContext
    from ._store import CodeStore, Workspace

__all__ = [
    "RESUMED_NOTE",
    "SHUTDOWN_REASON",
    "Phases",
    "Progress",
    "check_resumable",
    "paused",
    "test_of",
]

#: What the agent of a round that was running is told when it starts again.
RESUMED_NOTE = (
    "NOTE: this run was interrupted (the process running it stopped) and has been "
    "restarted. The files in the workspace hold what you did so far, exactly as you left "
    "them; nothing else was kept (no variables, no running processes, no earlier "
    "messages). Look at the files first, do not redo what is already done, and go on "
    "with the task."
)
_VERSION = 1
#: The cancel reason of an orderly daemon shutdown (``daemon/_taskrun.py``'s, which sits
#: above this layer; a test keeps the two in step): the task is resumed at the next
#: start, so its run is left where it got to, not recorded as failed.
SHUTDOWN_REASON = "daemon shutdown"


def paused(run: RunContext) -> bool:
    """Whether ``run`` was stopped by a daemon shutdown (to be resumed, not ended)."""
    return run.cancel.cancelled and run.cancel.reason == SHUTDOWN_REASON


def test_of(data: object) -> TestRun | None:
    """A stored test run (``TestRun.to_dict``) back as one; None for none."""
    if not isinstance(data, Mapping):
        return None
    return TestRun(
        command=str(data.get("command") or ""),
        exit_code=int(data.get("exit_code") or 0),
        output=str(data.get("output") or ""),
        duration_s=float(data.get("duration_s") or 0.0),
        reason=str(data.get("reason") or ""),
        verdict=str(data.get("verdict") or ""),
        error=str(data.get("error") or ""),
    )


@dataclasses.dataclass
class Progress:
    """How far a code run got (one workspace's). ``number`` is the round under way (or
    next); its ``prompt`` is set once its agent started, its ``outcome`` once its agent
    ended; ``rounds`` holds the finished rounds' records."""

    spec: dict[str, Any] = dataclasses.field(default_factory=dict)
    before_done: bool = False
    before: dict[str, Any] | None = None
    number: int = 1
    prompt: str = ""
    #: The round's agent started (and, while ``outcome`` is None, has not ended).
    started: bool = False
    outcome: dict[str, Any] | None = None
    #: The turns of the round's own agent run (``outcome``'s are the run's so far).
    own_turns: int = 0
    rounds: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    turns: int = 0
    usage: dict[str, Any] | None = None
    #: The inner agent's own checkpoint in the round under way, if it made one.
    inner: dict[str, Any] | None = None
    #: Tool calls started and not ended (their ids), the run's whole group.
    open_calls: list[str] = dataclasses.field(default_factory=list)
    #: How many times the run was resumed.
    resumed: int = 0
    done: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"version": _VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Progress:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def check_resumable(ws: Workspace) -> Progress:
    """``ws``'s progress, when its run can be resumed; else why not (WorkspaceError)."""
    state = ws.shown_state
    if state != "interrupted":
        if state == "running":
            raise WorkspaceError(f"workspace {ws.id}'s run is still running: it is not interrupted")
        raise WorkspaceError(
            f"workspace {ws.id}'s run is {state}, not interrupted: only an interrupted run resumes"
        )
    if not ws.progress:
        raise WorkspaceError(
            f"workspace {ws.id}'s run kept no record of its progress (it ran before runs "
            "could be resumed): review it with `jarvis code show`, or discard it"
        )
    progress = Progress.from_dict(ws.progress)
    if progress.open_calls:
        raise WorkspaceError(
            f"workspace {ws.id}'s run stopped during tool call {', '.join(progress.open_calls)}: "
            "its effect is unverified, so the run is not resumed (review the workspace with "
            "`jarvis code show`, then discard it or run the task again)"
        )
    return progress


class Phases:
    """Writes one workspace's :class:`Progress` as its run goes, and checkpoints the
    daemon's task after each write (``run.checkpoint``, when the run has one)."""

    def __init__(
        self, store: CodeStore, ws: Workspace, run: RunContext, progress: Progress
    ) -> None:
        self.store = store
        self.ws = ws
        self.run = run
        self.progress = progress

    def save(self, *, checkpoint: bool = True, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(self.progress, key, value)
        self.ws = self.store.update(self.ws, progress=self.progress.to_dict())
        if checkpoint and self.run.checkpoint is not None:
            self.run.checkpoint(
                {
                    "agent": "code",
                    "version": _VERSION,
                    "resumable": True,
                    "workspace": self.ws.id,
                    "round": self.progress.number,
                }
            )

    def inner_checkpoint(self, state: Mapping[str, Any]) -> None:
        """The inner agent's checkpoint, kept with the round (a sandboxed agent that
        cannot resume says so: the round then starts again on the workspace)."""
        self.save(inner=dict(state))

    def on_tool_event(self, event: Event) -> None:
        """Keep the calls in flight; checkpoint after each one that ended, so that a
        resume never counts it as replayed (the daemon's rule)."""
        call = str(event.data.get("call_id") or event.data.get("tool") or "?")
        calls = list(self.progress.open_calls)
        if event.type is EventType.TOOL_CALL_START:
            # The daemon records the start itself (a call in flight is never resumed).
            self.save(open_calls=[*calls, call], checkpoint=False)
        elif event.type is EventType.TOOL_CALL_END:
            if call in calls:
                calls.remove(call)
            self.save(open_calls=calls)
