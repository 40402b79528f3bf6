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
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acp import schema
from acp.exceptions import RequestError

from .._errors import JarvisError
from ._edits import CODE_AGENT, CODE_MODE, changed_files
from ._hello import initialize_reply
from ._store import SessionRecord, SessionStore
from ._updates import UpdateMapper, tool_kind

if TYPE_CHECKING:
    from .._config import Config
    from .._run import RunContext
    from ..runs import AgentSpec, RunOutcome

__all__ = ["JarvisAcpAgent"]

log = logging.getLogger(__name__)

#: The most prompt text taken from one ``session/prompt`` (characters).
MAX_PROMPT_CHARS = 1_000_000
#: The most MCP servers one session may bring.
MAX_MCP_SERVERS = 20
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
_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(eq=False)
class Session:
    id: str
    cwd: str
    mode: str
    model: str
    record: SessionRecord
    mcp: Mapping[str, Any] = field(default_factory=dict)  # name -> McpServerConfig
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
        self._conn: Any = None
        #: Whether the client offers fs/read_text_file and fs/write_text_file (set by
        #: initialize).
        self.client_reads_files = False
        self.client_writes_files = False
        self._loop_thread = threading.get_ident()

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    # ---- the protocol's methods -------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **_: Any,
    ) -> schema.InitializeResponse:
        fs = getattr(client_capabilities, "fs", None)
        self.client_reads_files = bool(getattr(fs, "read_text_file", False))
        self.client_writes_files = bool(getattr(fs, "write_text_file", False))
        reply = initialize_reply({"protocolVersion": int(protocol_version)})
        assert reply is not None
        return schema.InitializeResponse.model_validate(reply)

    async def authenticate(self, method_id: str, **_: Any) -> None:
        return None

    async def new_session(
        self, cwd: str, additional_directories: Any = None, mcp_servers: Any = None, **_: Any
    ) -> schema.NewSessionResponse:
        cwd = _checked_cwd(cwd)
        mcp = _mcp_servers(mcp_servers)
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
        **_: Any,
    ) -> schema.LoadSessionResponse:
        cwd = _checked_cwd(cwd)
        mcp = _mcp_servers(mcp_servers)
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
        self, cwd: str | None = None, cursor: str | None = None, **_: Any
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
        self, session_id: str, mode_id: str, **_: Any
    ) -> schema.SetSessionModeResponse:
        session = self._session(session_id)
        if mode_id not in self._mode_ids():
            raise RequestError.invalid_params({"message": f"no such mode: {str(mode_id)[:80]!r}"})
        session.mode = mode_id
        session.record.append({"kind": "set", "field": "mode", "value": mode_id})
        return schema.SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: Any, **_: Any
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

    async def cancel(self, session_id: str, **_: Any) -> None:
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

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> schema.PromptResponse:
        session = self._session(session_id)
        if session.task is not None and not session.task.done():
            raise RequestError.invalid_request(
                {"message": "a prompt is already running in this session"}
            )
        text = _prompt_text(prompt)
        if not text.strip():
            raise RequestError.invalid_params({"message": "the prompt has no text"})
        return await self._run_prompt(session, text)

    # ---- running a prompt ----------------------------------------------------------

    async def _run_prompt(self, session: Session, text: str) -> schema.PromptResponse:
        from .._run import RunContext
        from ..runs import run_spec

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        session.prompts += 1
        mapper = UpdateMapper(f"{session.id[:8]}-{session.prompts}")

        def put(update: Any) -> None:
            if threading.get_ident() == self._loop_thread:
                queue.put_nowait(update)
            else:  # an engine streaming from a worker thread
                loop.call_soon_threadsafe(queue.put_nowait, update)

        streamed = False

        def on_delta(chunk: str) -> None:
            nonlocal streamed
            if chunk:
                streamed = True
                put(_agent_text(chunk))

        def on_event(event: Any) -> None:
            for update in mapper.map(event):
                put(update)

        async def send_all() -> None:
            while True:
                update = await queue.get()
                try:
                    await self._send(session, update)
                except Exception:  # the client went away: nothing more to send
                    log.debug("could not send an update", exc_info=True)
                finally:
                    queue.task_done()

        run = RunContext(on_delta=on_delta)
        run.bus.subscribe(on_event)
        run.tool_gate = self._gate(session, run, mapper, queue)
        if self.client_reads_files:
            run.read_buffer = self._buffer_reader(session, loop)
        session.run, session.cancelled = run, False
        sender = asyncio.create_task(send_all())
        # Through the queue: a client gone by now ends nothing here (the run is
        # cancelled when the connection closes).
        put(
            schema.UserMessageChunk(
                session_update="user_message_chunk",
                content=schema.TextContentBlock(type="text", text=text),
            )
        )
        spec, config = self._spec(session, text)
        workspace = None
        if session.mode == CODE_MODE:
            try:
                workspace = await asyncio.to_thread(_prepare_workspace, session.cwd, text)
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
        if outcome is not None and outcome.ok and not streamed and outcome.answer:
            put(_agent_text(outcome.answer))
        if workspace is not None:
            said = await self._settle_change(session, workspace, outcome, run, mapper, queue)
            if said:
                put(_agent_text(f"\n\n{said}"))
        if outcome is not None and not outcome.ok and not session.cancelled:
            failure = outcome.failure
            assert failure is not None
            put(_agent_text(f"\n\njarvis: {failure.code}: {failure.message}"))
        await queue.join()
        sender.cancel()
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

    def _gate(
        self, session: Session, run: RunContext, mapper: UpdateMapper, queue: asyncio.Queue[Any]
    ) -> Any:
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

    async def _settle_change(
        self,
        session: Session,
        workspace: Any,
        outcome: RunOutcome | None,
        run: RunContext,
        mapper: UpdateMapper,
        queue: asyncio.Queue[Any],
    ) -> str:
        """Offer a code run's change to the client and apply it once allowed; the
        workspace is gone afterwards either way. What to tell the user."""
        from .._paths import paths
        from ..code import CodeStore, apply, discard

        state = paths().state
        store = CodeStore(state / "code.db")
        applied = False
        try:
            code = dict((outcome.metadata.get("code") or {}) if outcome is not None else {})
            files = code.get("files") or []
            if outcome is None or not outcome.ok or not files or session.cancelled:
                return (
                    "jarvis: no change to the project" if outcome is not None and outcome.ok else ""
                )
            changes = await asyncio.to_thread(changed_files, session.cwd, workspace.path, files)
            await queue.join()
            call_id = f"{session.id[:8]}-{session.prompts}-change"
            content: list[Any] = [
                schema.FileEditToolCallContent(
                    type="diff", path=c.path, old_text=c.old, new_text=c.new or ""
                )
                for c in changes or ()
            ]
            if not content:  # not text: the change is described, jarvis applies it
                listed = ", ".join(f"{f.get('status')} {f.get('path')}" for f in files[:50])
                content = [_text_block_content(f"changes: {listed}")]
            title = f"apply the change to {len(files)} file{'s' if len(files) != 1 else ''}"
            locations = [schema.ToolCallLocation(path=c.path) for c in changes or ()][:50]
            await self._send(
                session,
                schema.ToolCallStart(
                    session_update="tool_call",
                    tool_call_id=call_id,
                    title=title,
                    kind="edit",
                    status="pending",
                    content=content,
                    locations=locations or None,
                ),
            )
            allowed = await self._ask(
                session,
                run,
                schema.ToolCallUpdate(
                    tool_call_id=call_id,
                    title=title,
                    kind="edit",
                    status="pending",
                ),
            )
            if not allowed:
                await self._send(
                    session, _call_done(call_id, "failed", "not applied: the project is untouched")
                )
                return "jarvis: the change was not applied"
            if changes is not None and self.client_writes_files:
                for change in changes:
                    await self._conn.write_text_file(
                        session_id=session.id, path=change.path, content=change.new or ""
                    )
                how = "written through the editor"
            else:
                await asyncio.to_thread(apply, workspace.id, store, state)
                applied = True
                how = "applied by jarvis (three-way)"
            await self._send(session, _call_done(call_id, "completed", how))
            return f"jarvis: the change was {how}"
        except (JarvisError, RequestError, OSError, ConnectionError) as exc:
            return f"jarvis: the change was not applied: {exc}"
        finally:
            if not applied:
                try:
                    await asyncio.to_thread(discard, store.get(workspace.id), store, state)
                except JarvisError:
                    pass
            store.close()

    async def _ask(self, session: Session, run: RunContext, call: Any) -> bool:
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

    def _buffer_reader(self, session: Session, loop: asyncio.AbstractEventLoop) -> Any:
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

    async def _send(self, session: Session, update: Any) -> None:
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


def _text_block_content(text: str) -> Any:
    return schema.ContentToolCallContent(
        type="content", content=schema.TextContentBlock(type="text", text=text)
    )


def _call_done(call_id: str, status: str, text: str) -> Any:
    return schema.ToolCallProgress(
        session_update="tool_call_update",
        tool_call_id=call_id,
        status=status,  # type: ignore[arg-type]
        content=[_text_block_content(text)],
    )


def _prepare_workspace(cwd: str, task: str) -> Any:
    from .._paths import paths
    from ..code import CodeStore, prepare

    state = paths().state
    store = CodeStore(state / "code.db")
    try:
        return prepare(cwd, store=store, state_dir=state, task=task[:2000], agent=CODE_AGENT)
    finally:
        store.close()


def _agent_text(text: str) -> Any:
    return schema.AgentMessageChunk(
        session_update="agent_message_chunk",
        content=schema.TextContentBlock(type="text", text=text),
    )


def _checked_cwd(cwd: object) -> str:
    if not isinstance(cwd, str) or not os.path.isabs(cwd) or "\x00" in cwd or len(cwd) > 4096:
        raise RequestError.invalid_params({"message": "cwd must be an absolute path"})
    return os.path.normpath(cwd)


def _prompt_text(blocks: list[Any]) -> str:
    """The text of a prompt: its text blocks, and the text of resources embedded in it
    (a file the user attached), bounded."""
    parts: list[str] = []
    size = 0
    for block in blocks or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            part = block.text
        elif kind == "resource":
            resource = block.resource
            body = getattr(resource, "text", None)
            if not isinstance(body, str):
                continue
            part = f"\n--- {str(getattr(resource, 'uri', ''))[:500]} ---\n{body}\n"
        elif kind == "resource_link":
            part = f"[{str(getattr(block, 'uri', ''))[:500]}]"
        else:
            raise RequestError.invalid_params(
                {"message": f"jarvis takes no {str(kind)[:40]} content"}
            )
        size += len(part)
        if size > MAX_PROMPT_CHARS:
            raise RequestError.invalid_params(
                {"message": f"a prompt is at most {MAX_PROMPT_CHARS} characters"}
            )
        parts.append(part)
    return "".join(parts)


def _mcp_servers(servers: Any) -> dict[str, Any]:
    """The session's MCP servers as ``[mcp.servers]`` entries (stdio only), named
    ``acp_NAME`` so they never shadow the config's."""
    from .._config import McpServerConfig

    found: dict[str, Any] = {}
    for server in list(servers or ())[: MAX_MCP_SERVERS + 1]:
        if len(found) >= MAX_MCP_SERVERS:
            raise RequestError.invalid_params({"message": f"at most {MAX_MCP_SERVERS} MCP servers"})
        command = getattr(server, "command", None)
        if not isinstance(command, str) or not command:
            raise RequestError.invalid_params({"message": "jarvis takes stdio MCP servers only"})
        name = "acp_" + (_NAME.sub("_", str(server.name))[:40] or "server")
        while name in found:
            name += "_"
        env = {str(v.name)[:200]: str(v.value)[:10_000] for v in list(server.env or ())[:100]}
        found[name] = McpServerConfig(command=(command, *map(str, server.args[:200])), env=env)
    return found
