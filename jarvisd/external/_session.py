"""One ACP conversation with a started agent: initialize, ``session/new``,
``session/prompt``, and ``session/cancel`` when the run is cancelled.

A conversation jarvis lost when it stopped (a daemon killed mid-run) is taken up again
with ``session/load`` instead of ``session/new`` (:class:`Resume`), in a new agent
process with the same HOME: the agent replays the session's history as updates, which
are looked at (:class:`~._client.Replay`) but are not the run's events. When the
history shows the prompt arrived, the agent is told that jarvis restarted and to carry
on (the prompt is not sent again as new); when it does not, the prompt is sent. A tool
call the history shows started and never ended may or may not have had its effect: the
conversation stops there (an ExternalAgentError that says so) rather than guess.

The agent runs on a :class:`~jarvisd.executors.Channel` (a host process in its own
process group, or a container), which is always killed at the end, however the
conversation ended: agents that ignore stdin's end (codex-acp) or leave helpers behind
go with it. Every way the agent can fail (exit early, send garbage, answer with an
error, stay silent through the handshake) becomes one :class:`ExternalAgentError` or
:class:`ProtocolError` that says what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from .._errors import ExternalAgentError, ProtocolError
from .._runcontext import Cancelled, RunContext, RunStopped
from ..executors import Channel
from ._client import AcpClient, Replay
from ._mapping import clip
from ._transport import ChannelTransport

if TYPE_CHECKING:
    from acp import ClientSideConnection
    from acp.schema import McpServerStdio, PromptResponse

__all__ = [
    "CANCEL_GRACE_S",
    "HANDSHAKE_TIMEOUT_S",
    "RESUME_NOTE",
    "McpServer",
    "Resume",
    "converse",
]

#: How long an agent has to answer initialize and ``session/new`` (they start a
#: runtime, some load plugins: up to 13 s measured; a loaded machine needs more).
HANDSHAKE_TIMEOUT_S = 120.0
#: After ``session/cancel``, how long the agent has to end its prompt before it is killed.
CANCEL_GRACE_S = 3.0

_T = TypeVar("_T")

#: What a resumed agent is told in place of its prompt, when its history shows the
#: prompt arrived before jarvis stopped.
RESUME_NOTE = (
    "jarvis, the program that runs you, stopped while you were working on the task "
    "above and has restarted; your session was reloaded. Files in the workspace are "
    "as you left them. Continue the task from where you stopped: do not redo steps "
    "that already completed, and check the effect of any step you are unsure of."
)


@dataclass(frozen=True, slots=True)
class Resume:
    """The session a conversation continues (``session/load``), rather than a new one."""

    session_id: str
    note: str = RESUME_NOTE


@dataclass(frozen=True, slots=True)
class McpServer:
    """An MCP server (stdio) handed to the agent in ``session/new``."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=())

    def to_acp(self) -> McpServerStdio:
        from acp.schema import EnvVariable, McpServerStdio

        return McpServerStdio(
            name=self.name,
            command=self.command,
            args=list(self.args),
            env=[EnvVariable(name=k, value=v) for k, v in self.env],
        )


async def converse(
    channel: Channel,
    client: AcpClient,
    *,
    cwd: Path,
    prompt: str,
    run: RunContext,
    mcp_servers: Sequence[McpServer] = (),
    terminal: bool = False,
    handshake_timeout: float = HANDSHAKE_TIMEOUT_S,
    resume: Resume | None = None,
    on_session: Callable[[str, bool], None] | None = None,
) -> str:
    """Run one prompt to its end; returns the agent's stop reason. Raises Cancelled
    (the run's cancel token), BudgetExceeded (spent by the agent's tool calls),
    ExternalAgentError or ProtocolError. The channel is killed before this returns.

    ``resume``: load that session instead of making one (see the module docstring).
    ``on_session(session_id, loads)`` is called once the session is open, before
    anything is prompted; ``loads``: whether the agent advertises ``loadSession``."""
    import acp

    transport = ChannelTransport(channel)
    conn = acp.connect_to_agent(client, transport)  # type: ignore[arg-type]
    at = _Progress(asyncio.ensure_future(_stopped(run, client)))
    try:
        run.cancel.raise_if_cancelled()
        async with asyncio.timeout(handshake_timeout):
            session_id, loads = await _handshake(
                conn, at, run, client, cwd, mcp_servers, terminal, resume
            )
        client.session_id = session_id
        if on_session is not None:
            on_session(session_id, loads)
        if resume is not None:
            prompt = _after_replay(client, resume, prompt)
        at.step = "session/prompt"
        return await _prompt(conn, at, run, client, session_id, prompt)
    except TimeoutError:
        raise ExternalAgentError(
            f"the agent did not answer {at.step} within {handshake_timeout:g} s"
        ) from None
    except acp.RequestError as exc:
        if transport.error is not None:
            raise transport.error from None
        raise ExternalAgentError(
            f"the agent answered {at.step} with an error: {_describe(exc)}"
        ) from None
    except ConnectionError:
        if transport.error is not None:
            raise transport.error from None
        if run.cancel.cancelled or client.stopped is not None:
            _raise_stop(run, client)
        raise await _ended_early(channel, at.step) from None
    except (ProtocolError, RunStopped):
        raise
    except Exception as exc:
        if transport.error is not None:
            raise transport.error from None
        raise ExternalAgentError(
            f"the conversation with the agent failed at {at.step}: {exc}"
        ) from exc
    finally:
        # Read here: in the helper, the exception on its way out would not be seen.
        await _end(channel, conn, client, run, at, sys.exc_info()[1])


@dataclass(slots=True)
class _Progress:
    """How far a conversation got (its errors name the step) and the tasks its end
    cancels: ``stop`` returns when the run is cancelled or a budget is spent."""

    stop: asyncio.Future[None]
    step: str = "initialize"
    prompt: asyncio.Future[PromptResponse] | None = None


async def _handshake(
    conn: ClientSideConnection,
    at: _Progress,
    run: RunContext,
    client: AcpClient,
    cwd: Path,
    mcp_servers: Sequence[McpServer],
    terminal: bool,
    resume: Resume | None,
) -> tuple[str, bool]:
    """``initialize`` and ``session/new`` (or ``session/load`` of ``resume``); the
    session's id, and whether the agent advertises ``loadSession``."""
    import acp
    from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation

    from .._version import __version__

    capabilities = ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=terminal
    )
    hello = await _until_stopped(
        conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=capabilities,
            client_info=Implementation(name="jarvis", version=__version__),
        ),
        at.stop,
        run,
        client,
    )
    agent_capabilities = getattr(hello, "agent_capabilities", None)
    loads = bool(getattr(agent_capabilities, "load_session", False))
    servers = [s.to_acp() for s in mcp_servers]
    if resume is not None:
        if not loads:
            raise ExternalAgentError(
                "the agent no longer advertises loadSession: its session cannot be resumed"
            )
        at.step = "session/load"
        # Its replay names the session: it must be ours before the first update.
        client.session_id = resume.session_id
        client.replay = Replay()
        await _until_stopped(
            conn.load_session(cwd=str(cwd), session_id=resume.session_id, mcp_servers=servers),
            at.stop,
            run,
            client,
        )
        return resume.session_id, loads
    at.step = "session/new"
    session = await _until_stopped(
        conn.new_session(cwd=str(cwd), mcp_servers=servers), at.stop, run, client
    )
    return str(session.session_id), loads


def _after_replay(client: AcpClient, resume: Resume, prompt: str) -> str:
    """What a loaded session is prompted with: the note when its history holds the
    prompt, else the prompt (it never arrived). Raises ExternalAgentError when the
    history holds a tool call that never ended."""
    replay, client.replay = client.replay or Replay(), None
    if replay.open_calls:
        names = ", ".join(f"{t} ({c})" for c, t in list(replay.open_calls.items())[:5])
        raise ExternalAgentError(
            f"the agent's session shows tool call {names} started and never ended when "
            "jarvis stopped: effect unverified, not resumed (check its effect, then resubmit)"
        )
    return resume.note if replay.prompted else prompt


async def _prompt(
    conn: ClientSideConnection,
    at: _Progress,
    run: RunContext,
    client: AcpClient,
    session_id: str,
    prompt: str,
) -> str:
    """``session/prompt`` to its end, or ``session/cancel`` when the run stops; the
    stop reason."""
    import acp

    at.prompt = asyncio.ensure_future(
        conn.prompt(session_id=session_id, prompt=[acp.text_block(prompt)])
    )
    await asyncio.wait({at.prompt, at.stop}, return_when=asyncio.FIRST_COMPLETED)
    if not at.prompt.done():
        # Ask the agent to stop first (it may tidy up), then kill it regardless.
        with contextlib.suppress(Exception):
            await conn.cancel(session_id=session_id)
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(at.prompt), CANCEL_GRACE_S)
        _raise_stop(run, client)
    return str(at.prompt.result().stop_reason)


async def _end(
    channel: Channel,
    conn: ClientSideConnection,
    client: AcpClient,
    run: RunContext,
    at: _Progress,
    exc: BaseException | None,
) -> None:
    """The agent killed first (nothing after may leave it running), its open tool
    calls closed (``exc``: what ended the conversation, if anything), then everything
    else let go."""
    await channel.kill("closed")
    client.close_open_calls(_why_stopped(run, client, exc))
    at.stop.cancel()
    if at.prompt is not None:
        at.prompt.cancel()
    with contextlib.suppress(Exception):
        await conn.close()
    with contextlib.suppress(Exception):
        await client.close()
    with contextlib.suppress(Exception):
        await channel.stop("closed")


async def _stopped(run: RunContext, client: AcpClient) -> None:
    """Returns when the run is cancelled or the agent spent a budget."""
    cancel = asyncio.ensure_future(run.cancel.wait())
    spent = asyncio.ensure_future(client.stop.wait())
    try:
        await asyncio.wait({cancel, spent}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        cancel.cancel()
        spent.cancel()


async def _until_stopped(
    coro: Awaitable[_T], stop_task: asyncio.Future[None], run: RunContext, client: AcpClient
) -> _T:
    task = asyncio.ensure_future(coro)
    watched: set[asyncio.Future[object]] = {task, stop_task}  # type: ignore[arg-type]
    try:
        await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    if not task.done():
        task.cancel()
        _raise_stop(run, client)
    return task.result()


def _why_stopped(run: RunContext, client: AcpClient, exc: BaseException | None) -> str:
    """The reason given to the tool calls the conversation left open."""
    if client.stopped is not None:
        return str(client.stopped)
    if run.cancel.cancelled:
        return run.cancel.reason or "cancelled"
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"  # a pattern gave up on this member (a race lost)
    if exc is not None:
        return str(exc) or type(exc).__name__
    return "the agent ended its turn without ending the call"


def _raise_stop(run: RunContext, client: AcpClient) -> None:
    if client.stopped is not None:
        raise client.stopped
    # The token says why it stopped: a spent wall clock is BudgetExceeded, not a cancel.
    run.cancel.raise_if_cancelled()
    raise Cancelled(run.cancel.reason or "cancelled")


def _describe(exc: Exception) -> str:
    data = getattr(exc, "data", None)
    detail = f" ({clip(str(data), 300)})" if data else ""
    return clip(str(exc), 500) + detail


async def _ended_early(channel: Channel, step: str) -> ExternalAgentError:
    result = await channel.stop("closed")
    tail = "\n".join(result.stderr.strip().splitlines()[-5:])
    how = f"exit {result.exit_code}" + (f", {result.reason}" if result.reason else "")
    return ExternalAgentError(
        f"the agent ended during {step} ({how})" + (f":\n{clip(tail, 2000)}" if tail else "")
    )
