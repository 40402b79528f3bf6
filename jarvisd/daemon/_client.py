"""A small synchronous client for the jarvisd socket (what the CLI uses).

One connection per request; replies are read until the request's final one. An
``error`` reply is raised as the matching :class:`JarvisError`.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from jarvisd._errors import (
    DaemonError,
    DaemonUnavailable,
    ProtocolError,
)
from jarvisd._paths import paths
from jarvisd.runs._failures import from_wire
from jarvisd.runs._spec import AgentSpec

from ._identity import check_peer, check_private_dir
from ._protocol import (
    Ask,
    AskCancel,
    Delta,
    ErrorReply,
    EventReply,
    Ok,
    Ping,
    Pong,
    Reply,
    Request,
    ResultReply,
    Shutdown,
    Status,
    UiLogin,
    encode,
    parse_reply,
)

if TYPE_CHECKING:
    from ._taskwire import DaemonStatus, TaskInfo, TaskReply

# The task and status messages are imported by the methods that send them: `jarvis
# ask` uses this client too, and pays for every module it loads (see ``_taskwire``).

__all__ = ["Client", "raise_for_error"]

_R = TypeVar("_R", bound=Reply)
_MAX_REPLY_BYTES = 64 * 1024 * 1024
#: How often a long wait (``task wait``, ``task logs -f``, ``jarvis code``) asks the
#: daemon to say it is alive; a silence of three times as long (15 s) is an error.
FOLLOW_KEEPALIVE_S = 5.0


def _silence(keepalive: float | None) -> float | None:
    """The longest silence a request with ``keepalive`` waits out (None: for ever)."""
    return None if keepalive is None else max(3 * keepalive, keepalive + 1.0)


def raise_for_error(reply: ErrorReply) -> None:
    """Raise the error an ``error`` reply stands for (the one table of codes)."""
    error = from_wire(reply.code, reply.message)
    if type(error) is DaemonError:  # no more specific meaning: say where it came from
        raise DaemonError(f"jarvisd: {reply.message} ({reply.code})")
    raise error


class Client:
    def __init__(
        self,
        path: Path | None = None,
        *,
        timeout: float | None = 30.0,
        connect_timeout: float = 2.0,
    ) -> None:
        self.path = path or paths().socket
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._counter = 0

    def _connect(self) -> socket.socket:
        absent = f"no jarvisd answers on {self.path} (start it with `jarvis daemon start`)"
        # Before anything is sent: the directory must be ours and private, and the
        # process behind the socket must run as us (see ``_identity``).
        try:
            check_private_dir(self.path.parent)
        except DaemonUnavailable as exc:
            raise DaemonUnavailable(absent) from exc
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.connect_timeout)
        try:
            sock.connect(str(self.path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise DaemonUnavailable(absent) from exc
        except OSError as exc:
            sock.close()
            raise DaemonUnavailable(f"cannot connect to jarvisd on {self.path}: {exc}") from exc
        try:
            check_peer(sock, self.path)
        except DaemonError:
            sock.close()
            raise
        return sock

    def stream(self, request: Request, *, timeout: float | None = -1.0) -> Iterator[Reply]:
        """Send ``request``; yield each reply up to and including the final one.
        ``timeout`` is per read (None: wait forever; -1: the client's default)."""
        sock = self._connect()
        reader = None
        try:
            sock.settimeout(self.timeout if timeout == -1.0 else timeout)
            if not request.id:
                self._counter += 1
                request = dataclasses.replace(request, id=f"c{self._counter}")
            try:
                sock.sendall(encode(request))
            except OSError as exc:
                raise DaemonUnavailable(f"jarvisd closed the connection: {exc}") from exc
            # From here on the daemon may have acted on the request: losing it is an
            # error that says so (DaemonError), never "no daemon" (DaemonUnavailable),
            # which a caller may answer by doing the same work again elsewhere.
            reader = sock.makefile("rb")
            while True:
                try:
                    line = reader.readline(_MAX_REPLY_BYTES)
                except TimeoutError as exc:
                    waited = sock.gettimeout()
                    raise DaemonError(
                        f"jarvisd stopped answering: it did not answer for {waited:g} s (is "
                        "it stopped or hung? `jarvis daemon status`)"
                    ) from exc
                except OSError as exc:
                    raise DaemonError(
                        f"lost the connection to jarvisd while it was answering ({exc}); "
                        f"the {request.op} request was not sent again"
                    ) from exc
                if not line:
                    raise DaemonError(
                        "jarvisd closed the connection before it finished answering "
                        f"(did it stop?); the {request.op} request was not sent again"
                    )
                reply = parse_reply(line)
                if isinstance(reply, ErrorReply) and reply.id in ("", request.id):
                    raise_for_error(reply)
                yield reply
                if reply.final:
                    return
        finally:
            if reader is not None:
                reader.close()
            sock.close()

    def call(self, request: Request, expect: type[_R], *, timeout: float | None = -1.0) -> _R:
        """Send ``request`` and return its final reply, which must be an ``expect``."""
        final: Reply | None = None
        for reply in self.stream(request, timeout=timeout):
            final = reply
        if not isinstance(final, expect):
            raise ProtocolError(f"jarvisd answered {request.op} with {type(final).__name__}")
        return final

    # -- one method per request -----------------------------------------------------

    def ping(self) -> Pong:
        return self.call(Ping(), Pong)

    def status(self) -> DaemonStatus:
        from ._taskwire import StatusReply

        status = self.call(Status(), StatusReply).status
        assert status is not None
        return status

    def ui_login(self) -> str:
        """A login URL of the web console, with a new one-time token."""
        return self.call(UiLogin(), Ok).message

    def shutdown(self) -> None:
        self.call(Shutdown(), Ok)

    def ask(
        self, spec: AgentSpec, *, keepalive: float | None = 5.0, ask_id: str = ""
    ) -> Generator[Delta | EventReply | ResultReply, None, None]:
        """Run ``spec`` in the daemon: streamed text, forwarded run events, then the
        outcome. With a ``keepalive`` the daemon says it is alive that often, and a
        silence of three times as long is an error (a stopped daemon never hangs us).
        ``ask_id`` (unique) lets :meth:`cancel_ask` stop it from another connection."""
        request = Ask(id=ask_id, spec=spec, keepalive=keepalive)
        for reply in self.stream(request, timeout=_silence(keepalive)):
            if isinstance(reply, Delta | EventReply | ResultReply):
                yield reply

    def cancel_ask(self, ask_id: str, reason: str = "cancelled") -> None:
        """Stop the running ask ``ask_id``; it ends with a cancelled outcome."""
        self.call(AskCancel(ask=ask_id, reason=reason), Ok)

    def submit(
        self, spec: AgentSpec, *, watch: str | None = None, timeout: float | None = None
    ) -> TaskInfo:
        from ._taskwire import TaskReply, TaskSubmit

        return _task(self.call(TaskSubmit(spec=spec, watch=watch, timeout=timeout), TaskReply))

    def list_tasks(self, states: tuple[str, ...] = (), limit: int = 100) -> list[TaskInfo]:
        from ._taskwire import TaskList, TaskListReply

        return list(self.call(TaskList(states=states, limit=limit), TaskListReply).tasks)

    def show(self, task: str) -> TaskInfo:
        from ._taskwire import TaskReply, TaskShow

        return _task(self.call(TaskShow(task=task), TaskReply))

    def cancel(self, task: str) -> TaskInfo:
        from ._taskwire import TaskCancel, TaskReply

        return _task(self.call(TaskCancel(task=task), TaskReply))

    def answer(self, task: str, allow: bool) -> TaskInfo:
        """Approve (``allow``) or deny the permission request ``task`` waits on."""
        from ._taskwire import TaskAnswer, TaskReply

        return _task(self.call(TaskAnswer(task=task, allow=allow), TaskReply))

    def wait(
        self, task: str, timeout: float | None = None, *, keepalive: float = FOLLOW_KEEPALIVE_S
    ) -> TaskInfo:
        """The task once it has ended (or at ``timeout``). A daemon that stops saying it
        is alive (every ``keepalive`` seconds) for three times as long is an error."""
        from ._taskwire import TaskReply, TaskWait

        request = TaskWait(task=task, timeout=timeout, keepalive=keepalive)
        return _task(self.call(request, TaskReply, timeout=_silence(keepalive)))

    def logs(
        self,
        task: str,
        *,
        since: int = 0,
        follow: bool = False,
        keepalive: float = FOLLOW_KEEPALIVE_S,
    ) -> Iterator[EventReply]:
        """The task's events after ``since``; with ``follow``, until it ends (a daemon
        that stops answering is an error, as for :meth:`wait`)."""
        from ._taskwire import TaskLogs

        request = TaskLogs(
            task=task, since=since, follow=follow, keepalive=keepalive if follow else None
        )
        for reply in self.stream(request, timeout=_silence(keepalive) if follow else -1.0):
            if isinstance(reply, EventReply):
                yield reply


def _task(reply: TaskReply) -> TaskInfo:
    if reply.task is None:
        raise ProtocolError("jarvisd sent a task reply without a task")
    return reply.task
