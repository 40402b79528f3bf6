"""``jarvis acp``: jarvis as an ACP agent that editors and ACP clients drive.

:class:`JarvisAcpAgent` is the SDK's ``Agent`` seam. Each ``session/prompt`` is one
jarvis run (``jarvisd.runs.run_spec``, the same as ``jarvis ask`` in process) of the
session's mode (a registry agent, or the team), on its model, with the client's MCP
servers as tools. The run's streamed answer becomes ``agent_message_chunk``; its
events become tool calls and plans (``jarvisd.acp._updates``); each tool call that is
not pure thought asks the client (``session/request_permission``) before it runs, and a
refusal fails that call only. ``session/cancel`` cancels the run through its token
(its sandboxes stop with it) and the prompt ends with ``cancelled``.

Everything sent for a session is recorded (``jarvisd.acp._store``), so
``session/load`` replays it after a restart. The client is untrusted: its strings are
bounded, its paths must be absolute, its session ids are checked before they name a file.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acp import Client, schema
from acp.exceptions import RequestError

from .._errors import JarvisError
from ._change import prepare_workspace, settle_change
from ._edits import CODE_AGENT, CODE_MODE
from ._hello import initialize_reply
from ._input import checked_cwd, mcp_configs, prompt_text
from ._store import SessionRecord, SessionStore
from ._updates import UpdateMapper, tool_kind

if TYPE_CHECKING:
    from .._config import Config, McpServerConfig
    from .._events import Event
    from .._runcontext import RunContext
    from ..runs import AgentSpec, RunOutcome

__all__ = ["JarvisAcpAgent"]

log = logging.getLogger(__name__)

#: Seconds a cancelled run has to stop through its token before its task is cancelled.
CANCEL_GRACE_S = 10.0
#: Seconds the client has to give a buffer's text (then the disk is read).
BUFFER_READ_TIMEOUT_S = 30.0
#: The mode id of the team given with ``--team``.
TEAM_MODE = "team"
_MODE_TEXT = {
    TEAM_MODE: "the team of --team",
    CODE_MODE: "change the project: a jarvis code run, its diff offered for review",
}
_STOP_REASONS = {"budget": "max_tokens", "max_turns": "max_turn_requests"}

#: What one ``session/update`` carries (the SDK's union).
Update = (
    schema.UserMessageChunk
    | schema.AgentMessageChunk
    | schema.AgentThoughtChunk
    | schema.ToolCallStart
    | schema.ToolCallProgress
    | schema.AgentPlanUpdate
    | schema.AgentPlanContentUpdate
    | schema.AgentPlanRemovedUpdate
    | schema.AvailableCommandsUpdate
    | schema.CurrentModeUpdate
    | schema.ConfigOptionUpdate
    | schema.SessionInfoUpdate
    | schema.UsageUpdate
)


@dataclass(eq=False)
class Session:
    id: str
    cwd: str
    mode: str
    model: str
    record: SessionRecord
    mcp: Mapping[str, McpServerConfig] = field(default_factory=dict)
    always: set[str] = field(default_factory=set)  # tools the client always allows
    run: RunContext | None = None
    task: asyncio.Task[RunOutcome] | None = None
    cancelled: bool = False
    prompts: int = 0


class JarvisAcpAgent:
    """The agent side of ``jarvis acp`` (one per connection)."""

    def __init__(self, base: AgentSpec, config: Config, store: SessionStore) -> None:
        self._base = base
        self._config = config
        self._store = store
        self._sessions: dict[str, Session] = {}
        self._conn: Client = None  # type: ignore[assignment]  # set by on_connect
        #: Whether the client offers fs/read_text_file and fs/write_text_file (set by
        #: initialize).
        self.client_reads_files = False
        self.client_writes_files = False
        self._loop_thread = threading.get_ident()

    def on_connect(self, conn: Client) -> None:
        self._conn = conn

    # ---- the protocol's methods -------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **_: object,
    ) -> schema.InitializeResponse:
        fs = getattr(client_capabilities, "fs", None)
        self.client_reads_files = bool(getattr(fs, "read_text_file", False))
        self.client_writes_files = bool(getattr(fs, "write_text_file", False))
        reply = initialize_reply({"protocolVersion": int(protocol_version)})
        assert reply is not None
        return schema.InitializeResponse.model_validate(reply)

    async def authenticate(self, method_id: str, **_: object) -> None:
        return None

    async def new_session(
        self, cwd: str, additional_directories: Any = None, mcp_servers: Any = None, **_: object
    ) -> schema.NewSessionResponse:
        cwd = checked_cwd(cwd)
        mcp = mcp_configs(mcp_servers)
        mode = self._default_mode()
        header, record = self._store.create(
            cwd=cwd, agent=self._base.agent, mode=mode, model=self._base.model
        )
        self._sessions[header.session_id] = Session(
            header.session_id, cwd, mode, header.model, record, mcp
        )
        return schema.NewSessionResponse(
            session_id=header.session_id,
            modes=self._modes(mode),
            config_options=self._config_options(header.model),
        )

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: Any = None,
        additional_directories: Any = None,
        **_: object,
    ) -> schema.LoadSessionResponse:
        cwd = checked_cwd(cwd)
        mcp = mcp_configs(mcp_servers)
        try:
            header, record, updates = await asyncio.to_thread(self._store.open, session_id)
        except JarvisError as exc:
            raise RequestError.resource_not_found(str(exc)) from None
        old = self._sessions.get(header.session_id)
        if old is not None and old.task is not None and not old.task.done():
            raise RequestError.invalid_request({"message": "the session is running a prompt"})
        mode = header.mode if header.mode in self._mode_ids() else self._default_mode()
        session = Session(header.session_id, cwd, mode, header.model, record, mcp)
        self._sessions[session.id] = session
        for raw in updates:  # the history, as it was sent
            try:
                note = schema.SessionNotification.model_validate(
                    {"sessionId": session.id, "update": raw}
                )
            except ValueError:
                continue
            await self._conn.session_update(session_id=session.id, update=note.update)
        return schema.LoadSessionResponse(
            modes=self._modes(mode), config_options=self._config_options(session.model)
        )

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **_: object
    ) -> schema.ListSessionsResponse:
        import datetime

        headers = await asyncio.to_thread(self._store.list, cwd)
        return schema.ListSessionsResponse(
            sessions=[
                schema.SessionInfo(
                    session_id=h.session_id,
                    cwd=h.cwd,
                    title=h.title or None,
                    updated_at=datetime.datetime.fromtimestamp(h.updated, datetime.UTC).isoformat(),
                )
                for h in headers
            ]
        )

    async def set_session_mode(
        self, session_id: str, mode_id: str, **_: object
    ) -> schema.SetSessionModeResponse:
        session = self._session(session_id)
        if mode_id not in self._mode_ids():
            raise RequestError.invalid_params({"message": f"no such mode: {str(mode_id)[:80]!r}"})
        session.mode = mode_id
        session.record.append({"kind": "set", "field": "mode", "value": mode_id})
        return schema.SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: Any, **_: object
    ) -> schema.SetSessionConfigOptionResponse:
        session = self._session(session_id)
        known = [*self._model_ids(), self._base.model]
        if config_id != "model" or not isinstance(value, str) or not value or value not in known:
            raise RequestError.invalid_params(
                {"message": "the one option is model, one of the catalog's"}
            )
        session.model = "" if value == "default" else value
        session.record.append({"kind": "set", "field": "model", "value": session.model})
        return schema.SetSessionConfigOptionResponse(
            config_options=self._config_options(session.model)
        )

    async def cancel(self, session_id: str, **_: object) -> None:
        session = self._sessions.get(session_id)
        if session is None or session.run is None:
            return
        session.cancelled = True
        session.run.cancel.cancel("cancelled by the client")
        task = session.task
        if task is not None:
            # The token stops the run and its sandboxes; a run that ignores it for
            # longer than the grace is cancelled outright.
            asyncio.get_running_loop().call_later(
                CANCEL_GRACE_S, lambda: task.done() or task.cancel()
            )

    async def prompt(
        self, session_id: str, prompt: list[Any], **_: object
    ) -> schema.PromptResponse:
        session = self._session(session_id)
        if session.task is not None and not session.task.done():
            raise RequestError.invalid_request(
                {"message": "a prompt is already running in this session"}
            )
        text = prompt_text(prompt)
        if not text.strip():
            raise RequestError.invalid_params({"message": "the prompt has no text"})
        return await self._run_prompt(session, text)

    # ---- running a prompt ----------------------------------------------------------

    async def _run_prompt(self, session: Session, text: str) -> schema.PromptResponse:
        from .._runcontext import RunContext
        from ..runs import run_spec

        loop = asyncio.get_running_loop()
        session.prompts += 1
        mapper = UpdateMapper(f"{session.id[:8]}-{session.prompts}")
        out = _Outbox(self, session, loop)
        queue = out.queue

        def on_event(event: Event) -> None:
            for update in mapper.map(event):
                out.put(update)

        run = RunContext(on_delta=out.on_delta)
        run.bus.subscribe(on_event)
        run.tool_gate = self._gate(session, run, mapper, queue)
        if self.client_reads_files:
            run.read_buffer = self._buffer_reader(session, loop)
        session.run, session.cancelled = run, False
        sender = asyncio.create_task(out.send_all())
        # Through the queue: a client gone by now ends nothing here (the run is
        # cancelled when the connection closes).
        out.put(
            schema.UserMessageChunk(
                session_update="user_message_chunk",
                content=schema.TextContentBlock(type="text", text=text),
            )
        )
        spec, config = self._spec(session, text)
        workspace = None
        if session.mode == CODE_MODE:
            try:
                workspace = await asyncio.to_thread(prepare_workspace, session.cwd, text)
            except JarvisError as exc:
                await queue.join()
                sender.cancel()
                session.run = None
                raise RequestError.invalid_params({"message": str(exc)}) from None
            spec = dataclasses.replace(spec, workspace=workspace.id)
        session.task = asyncio.create_task(run_spec(spec, run, config))
        try:
            outcome: RunOutcome | None = await asyncio.shield(session.task)
        except asyncio.CancelledError:
            if not session.task.cancelled():  # this request itself was cancelled
                session.task.cancel()
                raise
            outcome = None
        finally:
            session.run = None
        if outcome is not None and outcome.ok and not out.streamed and outcome.answer:
            out.put(_agent_text(outcome.answer))
        if workspace is not None:
            said = await settle_change(self, session, workspace, outcome, run, queue)
            if said:
                out.put(_agent_text(f"\n\n{said}"))
        if outcome is not None and not outcome.ok and not session.cancelled:
            failure = outcome.failure
            assert failure is not None
            out.put(_agent_text(f"\n\njarvis: {failure.code}: {failure.message}"))
        await queue.join()
        sender.cancel()
        return _response(session, outcome)

    def _gate(
        self, session: Session, run: RunContext, mapper: UpdateMapper, queue: asyncio.Queue[Update]
    ) -> Callable[[str, Mapping[str, Any], str], Awaitable[bool]]:
        """The run's tool gate: the client allows each call that is not pure thought."""

        async def gate(tool: str, arguments: Mapping[str, Any], call_id: str) -> bool:
            kind = tool_kind(tool)
            if kind == "think" or tool in session.always:
                return True
            await queue.join()  # the client has seen the call before it is asked about it
            from ..external._mapping import _bounded

            call = schema.ToolCallUpdate(
                tool_call_id=mapper.started_id(tool, call_id) or f"{session.id[:8]}-ask",
                title=tool,
                kind=kind,  # type: ignore[arg-type]
                status="pending",
                raw_input=_bounded(dict(arguments)),
            )
            return await self._ask(session, run, call)

        return gate

    async def _ask(self, session: Session, run: RunContext, call: schema.ToolCallUpdate) -> bool:
        """The client's answer to a permission request for ``call`` (a cancel, an
        error or a closed connection: no)."""
        asked = asyncio.ensure_future(
            self._conn.request_permission(session_id=session.id, tool_call=call, options=_OPTIONS)
        )
        stopped = asyncio.ensure_future(run.cancel.wait())
        try:
            await asyncio.wait({asked, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not asked.done():
            asked.cancel()
            return False
        try:
            answer = asked.result()
        except Exception:
            return False
        outcome = getattr(answer, "outcome", None)
        option = getattr(outcome, "option_id", None)
        if getattr(outcome, "outcome", "") != "selected" or option not in ("allow", "allow_always"):
            return False
        if option == "allow_always" and call.title:
            session.always.add(str(call.title))
        return True

    def _buffer_reader(
        self, session: Session, loop: asyncio.AbstractEventLoop
    ) -> Callable[[str], str | None]:
        """``file_read``'s way to the client's buffers (``fs/read_text_file``), called
        from the tool's worker thread; None (the disk) on any failure."""

        def read(path: str) -> str | None:
            if threading.get_ident() == self._loop_thread:
                return None  # never wait for the loop on the loop
            future = asyncio.run_coroutine_threadsafe(
                self._conn.read_text_file(session_id=session.id, path=path), loop
            )
            try:
                text = future.result(timeout=BUFFER_READ_TIMEOUT_S).content
            except Exception:
                future.cancel()
                return None
            return text if isinstance(text, str) else None

        return read

    async def _send(self, session: Session, update: Update) -> None:
        session.record.append(
            {
                "kind": "update",
                "update": update.model_dump(mode="json", by_alias=True, exclude_none=True),
            }
        )
        await self._conn.session_update(session_id=session.id, update=update)

    def _spec(self, session: Session, text: str) -> tuple[AgentSpec, Config]:
        base = self._base
        config = self._config
        changes: dict[str, Any] = {"input": text, "model": session.model or base.model}
        if session.mode == CODE_MODE:
            changes["agent"] = CODE_AGENT
            changes["team"] = None
        elif session.mode != TEAM_MODE:
            changes["agent"] = session.mode
            changes["team"] = None
        if session.mcp:
            from .._config import McpConfig

            servers = {**config.mcp.servers, **session.mcp}
            config = dataclasses.replace(config, mcp=McpConfig(servers=servers))
            changes["tools"] = (*base.tools, *(f"{name}.*" for name in session.mcp))
        from ..external._registry import BUILTIN

        agent = changes.get("agent", base.agent)
        if agent in BUILTIN or agent in config.agents.external:  # works in a directory
            changes["options"] = {**base.options, "workspace": session.cwd}
        return dataclasses.replace(base, **changes), config

    # ---- sessions, modes, models ---------------------------------------------------

    def _session(self, session_id: str) -> Session:
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            raise RequestError.resource_not_found(f"session {str(session_id)[:80]}")
        return session

    def _default_mode(self) -> str:
        if self._base.team is not None:
            return TEAM_MODE
        return self._base.agent or self._config.agent.default

    def _mode_ids(self) -> list[str]:
        from ..agents import AgentRegistry

        ids = list(AgentRegistry.keys())
        ids += [name for name in self._config.agents.external if name not in ids]
        if self._base.team is not None:
            ids.insert(0, TEAM_MODE)
        ids.append(CODE_MODE)
        default = self._default_mode()
        if default not in ids:
            ids.insert(0, default)
        return ids

    def _modes(self, current: str) -> schema.SessionModeState:
        return schema.SessionModeState(
            current_mode_id=current,
            available_modes=[
                schema.SessionMode(
                    id=m, name=m, description="the team of --team" if m == TEAM_MODE else None
                )
                for m in self._mode_ids()
            ],
        )

    def _model_ids(self) -> list[str]:
        from ..catalog import CATALOG

        return ["default", *(entry.name for entry in CATALOG)]

    def _config_options(self, model: str) -> list[Any]:
        ids = self._model_ids()
        if model and model not in ids:
            ids.append(model)  # a model named on the command line
        return [
            schema.SessionConfigOptionSelect(
                type="select",
                id="model",
                name="Model",
                category="model",
                current_value=model or "default",
                options=[schema.SessionConfigSelectOption(value=m, name=m) for m in ids],
            )
        ]

    async def aclose(self) -> None:
        """Cancel what still runs (the client went away)."""
        for session in self._sessions.values():
            if session.run is not None:
                session.run.cancel.cancel("the client went away")
        tasks = [
            s.task for s in self._sessions.values() if s.task is not None and not s.task.done()
        ]
        if tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait(tasks, timeout=CANCEL_GRACE_S)
            for task in tasks:
                task.cancel()


_OPTIONS = [
    schema.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    schema.PermissionOption(option_id="allow_always", name="Always allow", kind="allow_always"),
    schema.PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]


class _Outbox:
    """A prompt's updates on their way to the client, in order, put from the loop or
    from an engine's worker thread."""

    def __init__(
        self, agent: JarvisAcpAgent, session: Session, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.agent, self.session, self.loop = agent, session, loop
        self.queue: asyncio.Queue[Update] = asyncio.Queue()
        self.streamed = False  # some of the answer went out as it was generated

    def put(self, update: Update) -> None:
        if threading.get_ident() == self.agent._loop_thread:
            self.queue.put_nowait(update)
        else:  # an engine streaming from a worker thread
            self.loop.call_soon_threadsafe(self.queue.put_nowait, update)

    def on_delta(self, chunk: str) -> None:
        if chunk:
            self.streamed = True
            self.put(_agent_text(chunk))

    async def send_all(self) -> None:
        while True:
            update = await self.queue.get()
            try:
                await self.agent._send(self.session, update)
            except Exception:  # the client went away: nothing more to send
                log.debug("could not send an update", exc_info=True)
            finally:
                self.queue.task_done()


def _response(session: Session, outcome: RunOutcome | None) -> schema.PromptResponse:
    """How the prompt ended, for the client."""
    if (
        session.cancelled
        or outcome is None
        or (outcome.failure and outcome.failure.code == "cancelled")
    ):
        return schema.PromptResponse(stop_reason="cancelled")
    if outcome.failure is not None:
        reason = _STOP_REASONS.get(outcome.failure.code, "end_turn")
        return schema.PromptResponse(stop_reason=reason)  # type: ignore[arg-type]
    return schema.PromptResponse(stop_reason="end_turn")


def _agent_text(text: str) -> schema.AgentMessageChunk:
    return schema.AgentMessageChunk(
        session_update="agent_message_chunk",
        content=schema.TextContentBlock(type="text", text=text),
    )
