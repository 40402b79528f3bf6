"""The jarvis side of an ACP conversation: what the agent's requests and notifications
do on the host.

* ``session/update``: mapped (:mod:`._mapping`) onto the run: streamed text to
  ``run.on_delta``, tool calls and plans as events on the run's bus, each tool call
  counted against the run's tool-call budget;
* ``session/request_permission``: answered by the :class:`PermissionPolicy`;
* ``fs/*``: confined to the workspace (:class:`Workspace`);
* ``terminal/*``: only for agents on the host (:class:`Terminals`), else refused.

Every request must name this conversation's session. Errors of the host's making are
answered to the agent as JSON-RPC errors, never raised out of the connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import ToolError
from .._events import EventType
from .._messages import ToolResult
from .._runcontext import BudgetExceeded, RunContext
from ._answer import strip_notice
from ._mapping import (
    PlanChanged,
    TextDelta,
    ToolEnded,
    ToolStarted,
    ToolTitles,
    clip,
    map_update,
)
from ._permissions import (
    Approver,
    PermissionPolicy,
    PermissionRequest,
    input_facts,
    pick_option,
)
from ._protected import protected_reason
from ._workspace import Workspace

if TYPE_CHECKING:
    from acp.schema import (
        CreateTerminalResponse,
        EnvVariable,
        KillTerminalResponse,
        PermissionOption,
        ReadTextFileResponse,
        ReleaseTerminalResponse,
        RequestPermissionResponse,
        TerminalOutputResponse,
        ToolCallUpdate,
        WaitForTerminalExitResponse,
        WriteTextFileResponse,
    )

    from ._terminals import Terminals

__all__ = ["MAX_ANSWER_CHARS", "AcpClient", "Replay"]

log = logging.getLogger(__name__)

#: The most of an answer kept (an agent streaming without end is cut here).
MAX_ANSWER_CHARS = 1_000_000
#: Tool results kept for the run's outcome.
MAX_TOOL_RESULTS = 1000


def _request_error(message: str) -> Exception:
    from acp import RequestError

    return RequestError.invalid_params({"details": message})


@dataclass(slots=True)
class Replay:
    """What a session's replay (``session/load``) showed: whether it holds a message of
    the user's (the prompt reached the agent before jarvis stopped), and the tool calls
    it started and never ended (their effect is unverified)."""

    prompted: bool = False
    open_calls: dict[str, str] = field(default_factory=dict)

    def see(self, update: object) -> None:
        kind = getattr(update, "session_update", None)
        if kind == "user_message_chunk":
            self.prompted = True
        elif kind in ("tool_call", "tool_call_update"):
            call_id = str(getattr(update, "tool_call_id", "") or "")
            status = getattr(update, "status", None)
            if status in ("completed", "failed"):
                self.open_calls.pop(call_id, None)
            elif kind == "tool_call" and len(self.open_calls) < MAX_TOOL_RESULTS:
                title = getattr(update, "title", None) or "tool"
                self.open_calls[call_id] = clip(str(title), 200)


class AcpClient:
    """Implements ``acp.Client`` for one run of agent ``agent``."""

    def __init__(
        self,
        run: RunContext,
        workspace: Workspace,
        *,
        agent: str,
        policy: PermissionPolicy | None = None,
        approver: Approver | None = None,
        terminals: Terminals | None = None,
    ) -> None:
        self.run = run
        self.workspace = workspace
        self.agent = agent
        self.policy = policy or PermissionPolicy()
        self.approver = approver
        self.terminals = terminals
        self.session_id: str | None = None
        self.answer: list[str] = []
        self.answer_chars = 0
        #: Where the answer starts in ``answer``: after the last tool call (the text
        #: before it was the agent's narration, not its answer).
        self.answer_start = 0
        self.tool_results: list[ToolResult] = []
        #: Tool calls started and not yet ended (call id -> title), for their synthetic
        #: ends when the conversation stops under them.
        self.open_calls: dict[str, str] = {}
        #: Set when the run must stop (a budget spent by the agent's tool calls).
        self.stopped: BudgetExceeded | None = None
        self.stop = asyncio.Event()
        self._titles = ToolTitles()
        #: Called after each tool call the agent ends (the run checkpoints there, so
        #: that no completed call stands between its last checkpoint and a crash).
        self.on_tool_end: Callable[[], None] | None = None
        #: Set while ``session/load`` replays a session: its updates are history, not
        #: news (no events, no answer), only looked at (:class:`Replay`).
        self.replay: Replay | None = None

    # -- checks ----------------------------------------------------------------------

    def _check_session(self, session_id: str) -> None:
        if self.session_id is None or session_id != self.session_id:
            raise _request_error(f"unknown session {clip(str(session_id), 100)!r}")

    # -- session/update --------------------------------------------------------------

    async def session_update(self, session_id: str, update: object, **kwargs: Any) -> None:
        if self.session_id is None or session_id != self.session_id:
            return  # a notification has no reply: ignore what is not ours
        if self.replay is not None:
            self.replay.see(update)
            return
        for item in map_update(update, self._titles):
            self._apply(item)

    def _apply(self, item: object) -> None:
        run, depth = self.run, self.run.depth
        if isinstance(item, TextDelta):
            room = MAX_ANSWER_CHARS - self.answer_chars
            text = strip_notice(item.text)[: max(room, 0)]
            if not text:
                return
            self.answer.append(text)
            self.answer_chars += len(text)
            if run.on_delta is not None:
                run.on_delta(text)
        elif isinstance(item, ToolStarted):
            self.answer_start = len(self.answer)
            run.bus.publish(
                EventType.TOOL_CALL_START,
                tool=item.title,
                arguments=item.arguments,
                call_id=item.call_id,
                kind=item.kind,
                agent=self.agent,
                depth=depth,
            )
            if len(self.open_calls) < MAX_TOOL_RESULTS:
                self.open_calls[item.call_id] = item.title
            try:
                run.budget.reserve_tool_call()
            except BudgetExceeded as exc:
                if self.stopped is None:
                    self.stopped = exc
                self.stop.set()
        elif isinstance(item, ToolEnded):
            self.open_calls.pop(item.call_id, None)
            run.bus.publish(
                EventType.TOOL_CALL_END,
                tool=item.title,
                success=item.success,
                content=item.content,
                call_id=item.call_id,
                agent=self.agent,
                depth=depth,
            )
            if len(self.tool_results) < MAX_TOOL_RESULTS:
                self.tool_results.append(
                    ToolResult(item.title, item.content, item.success, item.call_id)
                )
            if self.on_tool_end is not None:
                self.on_tool_end()
        elif isinstance(item, PlanChanged):
            run.bus.publish(
                EventType.AGENT_PLAN,
                entries=[list(e) for e in item.entries],
                agent=self.agent,
                depth=depth,
            )

    def close_open_calls(self, reason: str) -> None:
        """End every call the agent started and never ended, with a synthetic failed
        result: no tool call is left open when the conversation stops (a cancel, a
        spent budget, an agent killed or ending its turn mid-call)."""
        for call_id, title in self.open_calls.items():
            content = f"cancelled: {reason}"
            self.run.bus.publish(
                EventType.TOOL_CALL_END,
                tool=title,
                success=False,
                content=content,
                call_id=call_id,
                agent=self.agent,
                depth=self.run.depth,
                synthetic=True,
            )
            if len(self.tool_results) < MAX_TOOL_RESULTS:
                self.tool_results.append(ToolResult(title, content, False, call_id))
        self.open_calls.clear()

    # -- session/request_permission ----------------------------------------------------

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

        self._check_session(session_id)
        declared = str(getattr(tool_call, "kind", None) or "other")
        title = clip(str(getattr(tool_call, "title", None) or "tool"), 200)
        # Judged by what the call's input shows, not only the kind the agent declares.
        shown, paths = input_facts(
            getattr(tool_call, "raw_input", None), getattr(tool_call, "locations", None) or ()
        )
        kind, decision = self.policy.judge([declared, *sorted(shown)])
        if declared not in ("read", "search") and any(self._protected(p) for p in paths):
            kind, decision = "edit", "deny"
        allowed = decision == "allow"
        if decision == "ask":
            allowed = False
            if self.approver is not None:
                request = PermissionRequest(title, kind, getattr(tool_call, "raw_input", None))
                allowed = bool(await self.approver(request))
        self.run.bus.publish(
            EventType.PERMISSION,
            tool=title,
            kind=kind,
            declared=declared,
            decision=decision,
            allowed=allowed,
            agent=self.agent,
            depth=self.run.depth,
        )
        option = pick_option(options, allowed)
        if option is None:
            # Nothing to pick that says what was decided: refusing is the safe answer.
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=option)
        )

    def _protected(self, path: str) -> bool:
        """Whether ``path`` is one the agent may not write (see :mod:`._protected`)."""
        try:
            parts = self.workspace.parts(path)
        except ToolError:
            return False
        return protected_reason(parts) is not None

    # -- fs/* ------------------------------------------------------------------------

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        from acp.schema import ReadTextFileResponse

        self._check_session(session_id)
        try:
            text = await asyncio.to_thread(self.workspace.read_text, path, line, limit)
        except ToolError as exc:
            raise _request_error(str(exc)) from None
        return ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        from acp.schema import WriteTextFileResponse

        self._check_session(session_id)
        try:
            await asyncio.to_thread(self.workspace.write_text, path, content)
        except ToolError as exc:
            raise _request_error(str(exc)) from None
        return WriteTextFileResponse()

    # -- terminal/* ------------------------------------------------------------------

    def _terminals(self) -> Terminals:
        if self.terminals is None:
            raise _request_error("this client offers no terminals (the agent is sandboxed)")
        return self.terminals

    async def create_terminal(
        self,
        command: str,
        session_id: str,
        args: list[str] | None = None,
        cwd: str | None = None,
        env: list[EnvVariable] | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        from acp.schema import CreateTerminalResponse

        self._check_session(session_id)
        terminals = self._terminals()
        try:
            directory = self.workspace.directory(cwd)
            variables = {str(v.name): str(v.value) for v in env or ()}
            terminal_id = await terminals.create(
                command, list(args or ()), variables, directory, output_byte_limit
            )
        except ToolError as exc:
            raise _request_error(str(exc)) from None
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        from acp.schema import TerminalExitStatus, TerminalOutputResponse

        self._check_session(session_id)
        try:
            output, truncated, code, sig = self._terminals().output(terminal_id)
        except ToolError as exc:
            raise _request_error(str(exc)) from None
        done = code is not None or sig is not None
        status = TerminalExitStatus(exit_code=code, signal=sig) if done else None
        return TerminalOutputResponse(output=output, truncated=truncated, exit_status=status)

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        from acp.schema import WaitForTerminalExitResponse

        self._check_session(session_id)
        try:
            code, sig = await self._terminals().wait(terminal_id)
        except ToolError as exc:
            raise _request_error(str(exc)) from None
        return WaitForTerminalExitResponse(exit_code=code, signal=sig)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse:
        from acp.schema import KillTerminalResponse

        self._check_session(session_id)
        try:
            self._terminals().kill(terminal_id)
        except ToolError as exc:
            raise _request_error(str(exc)) from None
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse:
        from acp.schema import ReleaseTerminalResponse

        self._check_session(session_id)
        await self._terminals().release(terminal_id)
        return ReleaseTerminalResponse()

    async def close(self) -> None:
        if self.terminals is not None:
            await self.terminals.close()

    def answer_text(self) -> str:
        """The agent's answer: what it said after its last tool call (``_answer``)."""
        from ._answer import clean_answer

        # An agent that answered and then called one more tool (a to-do list) still
        # has an answer: all it said, cleaned.
        return clean_answer("".join(self.answer[self.answer_start :])) or clean_answer(
            "".join(self.answer)
        )
