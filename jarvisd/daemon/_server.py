"""jarvisd: the asyncio server on the Unix socket, and its lifecycle.

Lifecycle, as uvicorn does it: signal handlers only set a flag (and wake the loop); the
previous handlers are restored on the way out; the socket and pid files are removed in
``finally``; the process exits with a named :class:`ExitCode`. On SIGTERM/SIGINT the
daemon stops accepting, stops running tasks at their next safe point and records each
for resuming (see ``_tasks``), then exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import logging
import os
import signal
import threading
import time
from collections.abc import AsyncGenerator, Callable, Coroutine
from pathlib import Path
from types import FrameType
from typing import Any

from jarvisd._config import Config, load_config
from jarvisd._errors import (
    ConfigError,
    DaemonError,
    JarvisError,
    ProtocolError,
    StoreError,
    TaskNotFound,
    UsageError,
)
from jarvisd._paths import paths
from jarvisd._runcontext import CancelToken
from jarvisd._version import __version__
from jarvisd.cluster import backend_for, check_placement
from jarvisd.runs._failures import to_wire

from ._askpool import AskPool
from ._identity import check_private_dir, peer_uid, write_pid_file
from ._lifecycle import DaemonPaths, ExitCode, socket_answers, take_lock
from ._protocol import (
    PROTOCOL_VERSION,
    TERMINAL_STATES,
    Ask,
    AskCancel,
    DaemonStatus,
    ErrorReply,
    Ok,
    Ping,
    Pong,
    Reply,
    Request,
    Shutdown,
    Status,
    StatusReply,
    TaskAnswer,
    TaskCancel,
    TaskInfo,
    TaskList,
    TaskListReply,
    TaskLogs,
    TaskReply,
    TaskShow,
    TaskSubmit,
    TaskWait,
    UiLogin,
    encode,
    parse_request,
    request_id,
)
from ._replies import _peer, stream_ask, stream_logs, stream_wait, wait_task
from ._store import TaskStore
from ._tasks import TaskManager
from ._watch import Watcher, WatchFilter, count_dirs

__all__ = ["Daemon", "DaemonPaths", "ExitCode", "socket_answers", "take_lock"]

log = logging.getLogger(__name__)

_CONFIG_WATCH = "config"
#: How often sandbox containers whose owning process is gone are removed while the
#: daemon runs (a worker killed mid-run, or by a stall, cannot remove its own).
_SWEEP_EVERY_S = 60.0
#: The second sweep after start (see ``_sweep_periodically``).
_SWEEP_AGAIN_S = 10.0


def _watch_root(watch: str, limit: int) -> str:
    """The directory ``--watch`` names, resolved; refused when it is none, or holds more
    than ``limit`` directories (walking it takes a while: call it off the loop)."""
    path = Path(watch).expanduser()
    if not path.is_dir():
        raise UsageError(f"--watch {watch}: not a directory")
    if count_dirs(path, limit) > limit:
        raise UsageError(
            f"--watch {watch}: more than {limit} directories to watch "
            "(daemon.watch_max_dirs): watch a smaller tree, or raise the limit"
        )
    return str(path.resolve())


class Daemon:
    def __init__(
        self,
        config: Config | None = None,
        *,
        daemon_paths: DaemonPaths | None = None,
        config_path: Path | None = None,
    ) -> None:
        self.paths = daemon_paths or DaemonPaths.default()
        self.config_path = config_path or paths().config_file
        self.config = config or Config()
        self.config_error = ""
        self.config_loaded_at = time.time()
        self.started_at = time.time()
        self.store = TaskStore(self.paths.database)
        self.tasks = TaskManager(self.store, lambda: self.config)
        self.asks = AskPool(lambda: self.config)
        self.watcher = Watcher(debounce=1.0)
        self.should_exit = False
        self._stop = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._watch_runs: dict[str, str] = {}  # watch task id -> its latest run's id
        self._previous_handlers: dict[int, Any] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._asks: dict[str, CancelToken] = {}  # running asks by request id
        self._sweeping = threading.Lock()
        self._sweep_failed = False
        self.console: Any = None  # the web console's server (jarvisd.ui), once started
        self._pool_keeper: Any = None  # the sandbox warm pool's keeper, when kept
        self._swept = threading.Event()  # the first orphan sweep is over

    # -- lifecycle ------------------------------------------------------------------

    def handle_exit(self, sig: int, frame: FrameType | None = None) -> None:
        """Signal handler: only sets the flag and wakes the loop."""
        self.should_exit = True
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._stop.set)

    def handle_reload(self, sig: int, frame: FrameType | None = None) -> None:
        """SIGHUP (systemd's ExecReload, `kill -HUP`): reload the config file, on the loop."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.reload_config)

    def _install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous_handlers[sig] = signal.signal(sig, self.handle_exit)
        self._previous_handlers[signal.SIGHUP] = signal.signal(signal.SIGHUP, self.handle_reload)

    def _restore_signal_handlers(self) -> None:
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        self._previous_handlers.clear()

    async def serve(self) -> ExitCode:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        # The socket and pid file go in a directory that must be ours alone: never one
        # another user made (or a symlink), where they could stand in for us.
        try:
            for runtime in dict.fromkeys((self.paths.socket.parent, self.paths.pid_file.parent)):
                check_private_dir(runtime, create=True)
        except DaemonError as exc:
            log.error("%s", exc)
            return ExitCode.UNSAFE_RUNTIME_DIR
        # Two daemons on one database would both recover and run the same tasks: the
        # lock decides, before anything is read, even when both start at the same time.
        lock = take_lock(self.paths.lock_file)
        if lock is None:
            log.error(
                "another jarvisd already answers for %s (it holds %s)",
                self.paths.database,
                self.paths.lock_file,
            )
            return ExitCode.ALREADY_RUNNING
        try:
            return await self._serve_locked()
        finally:
            os.close(lock)

    async def _serve_locked(self) -> ExitCode:
        if self.paths.socket.exists() or self.paths.socket.is_symlink():
            if await asyncio.to_thread(socket_answers, self.paths.socket):
                log.error("another jarvisd already answers on %s", self.paths.socket)
                return ExitCode.ALREADY_RUNNING
            log.warning("removing a stale socket %s", self.paths.socket)
            self.paths.socket.unlink()
        self._install_signal_handlers()
        bound = False
        try:
            try:
                self.store.open()
                await self.tasks.start()
            except StoreError as exc:  # one line saying what to do, no traceback
                log.error("%s", exc)
                return ExitCode.FAILURE
            # Off the loop: an engine that is slow to answer must not hold up start-up,
            # and the sweep spares containers whose owner is alive, so it can run late.
            self._start_sweep()
            self._in_background(self._sweep_periodically())
            await self.asks.start()
            self._in_background(self._keep_warm_pool())
            await self._start_console()
            # Watching before serving: a config change made as soon as the daemon
            # answers (by a script, a test) must not be missed.
            await self._start_watching()
            limit = self.config.daemon.max_frame_bytes + 1
            old_umask = os.umask(0o177)  # the socket is born 0600: no window for others
            try:
                self._server = await asyncio.start_unix_server(
                    self._on_connection, path=str(self.paths.socket), limit=limit
                )
            finally:
                os.umask(old_umask)
            bound = True
            self.paths.socket.chmod(0o600)
            write_pid_file(self.paths.pid_file)
            log.info(
                "jarvisd %s (pid %d) listening on %s", __version__, os.getpid(), self.paths.socket
            )
            watch_loop = asyncio.create_task(
                self.watcher.run(self._stop, self._on_watch_fire, self._watch_busy)
            )
            await self._stop.wait()
            log.info("shutting down: no new connections; stopping running tasks")
            self._server.close()
            await self.tasks.stop()
            await self.asks.stop()
            for conn in list(self._connections):
                conn.cancel()
            await asyncio.gather(*self._connections, watch_loop, return_exceptions=True)
            return ExitCode.OK
        finally:
            self.watcher.stop()
            await self.asks.stop()
            if self._pool_keeper is not None:  # its idle containers go with the daemon
                await asyncio.to_thread(self._pool_keeper.stop)
            if self.console is not None:
                await self.console.aclose()
            if self._server is not None:
                self._server.close()
            self.store.close()
            if bound:
                with contextlib.suppress(FileNotFoundError):
                    self.paths.socket.unlink()
                with contextlib.suppress(FileNotFoundError):
                    self.paths.pid_file.unlink()
            self._restore_signal_handlers()

    async def _start_console(self) -> None:
        """The web console on its loopback port, when ``[ui] enabled``; a port in use
        leaves the daemon running without it (said in the log)."""
        if not self.config.ui.enabled:
            return
        from jarvisd.ui import ConsoleServer

        console = ConsoleServer(self, self.config.ui.port)
        if await console.start():
            self.console = console

    async def _keep_warm_pool(self) -> None:
        """Keep ``sandbox.warm_pool`` started containers for the workers' code agents,
        and ``agents.warm`` started external agents (off the loop: the engine may be
        slow to answer)."""
        if not (self.config.sandbox.warm_pool or self.config.agents.warm):
            return
        from ._warmpool import start_keeper

        def start() -> Any:
            # After the first sweep: it imports the docker SDK, whose import is not safe
            # in two threads at once, and removes a previous daemon's containers first.
            self._swept.wait(self.config.sandbox.engine_timeout * 2)
            keeper = start_keeper(self.config)
            if keeper is not None and self._stop.is_set():  # the daemon stopped meanwhile
                keeper.stop()
                return None
            return keeper

        self._pool_keeper = await asyncio.to_thread(start)

    def _start_sweep(self) -> None:
        """Sweep in a thread of its own (a daemon thread: an engine that hangs holds up
        neither the loop nor shutdown); never two at once."""
        if self._sweeping.locked():
            return
        threading.Thread(target=self._sweep_once, name="orphan-sweep", daemon=True).start()

    async def _sweep_periodically(self) -> None:
        # Once more soon after start: a container whose create a killed worker had sent
        # can appear after the first sweep (the engine finishes it for a dead owner).
        await asyncio.sleep(_SWEEP_AGAIN_S)
        while True:
            self._start_sweep()
            await asyncio.sleep(_SWEEP_EVERY_S)

    def _sweep_once(self) -> None:
        if not self._sweeping.acquire(blocking=False):
            return
        try:
            self._sweep_orphans()
        finally:
            self._sweeping.release()
            self._swept.set()

    def _sweep_orphans(self) -> None:
        """Remove sandbox containers whose owning process is gone: those a previous
        daemon left, and those of workers that were killed (when the sandbox has it)."""
        if self.config.sandbox.backend not in ("docker", "podman"):
            return
        try:
            sweep_orphans = getattr(
                importlib.import_module("jarvisd.sandbox"), "sweep_orphans", None
            )
        except ImportError as exc:
            log.info("no orphan sweep: %s", exc)
            return
        if sweep_orphans is None:
            log.info("no orphan sweep: jarvisd.sandbox has no sweep_orphans")
            return
        try:
            removed = sweep_orphans(self.config)
        except Exception as exc:  # no container engine must never stop the daemon
            # Said once, not every minute, while it keeps failing.
            level = logging.DEBUG if self._sweep_failed else logging.WARNING
            self._sweep_failed = True
            log.log(level, "orphan container sweep failed, continuing: %s", exc)
            return
        self._sweep_failed = False
        if removed:
            log.warning("removed orphan sandbox containers: %s", removed)

    # -- watching -------------------------------------------------------------------

    async def _start_watching(self) -> None:
        config_dir, is_config = self._config_watch()
        await self.watcher.add(_CONFIG_WATCH, config_dir, is_config, recursive=False)
        # Large trees take seconds to watch: serve meanwhile.
        for task_id, path in self.store.active_watches():
            self._in_background(self._add_task_watch(task_id, path))

    def _config_watch(self) -> tuple[Path, Callable[[str], bool]]:
        self.watcher.start()
        config_dir = self.config_path.parent
        config_dir.mkdir(parents=True, exist_ok=True)
        target = os.path.realpath(self.config_path)
        return config_dir, lambda path: os.path.realpath(path) == target

    def _in_background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _add_task_watch(self, task_id: str, path: str) -> None:
        p = paths()
        own = WatchFilter.for_daemon(
            [p.state, p.data, p.cache, p.runtime, self.paths.database.parent]
        )
        try:
            await self.watcher.add(task_id, Path(path), own)
        except OSError as exc:
            log.error("task %s: cannot watch %s: %s", task_id, path, exc)

    def _on_watch_fire(self, key: str) -> None:
        if key == _CONFIG_WATCH:
            self.reload_config()
            return
        try:
            origin = self.store.get(key)
        except TaskNotFound:
            self.watcher.remove(key)
            return
        if origin.state == "cancelled":
            self.watcher.remove(key)
            return
        try:
            rerun = self.tasks.submit(origin.spec, timeout=origin.timeout, rerun_of=origin.id)
        except DaemonError as exc:
            log.warning("watch %s: cannot re-run: %s", key, exc)
            return
        self._watch_runs[key] = rerun.id
        log.info("watch %s: files changed, re-running as task %s", key, rerun.id)

    def _watch_busy(self, key: str) -> bool:
        """True while the watch's latest run is live: its writes are not 'changes'."""
        if key == _CONFIG_WATCH:
            return False
        latest = self._watch_runs.get(key, key)
        with contextlib.suppress(TaskNotFound):
            info = self.store.get(latest)
            if info.state not in TERMINAL_STATES:
                return True
            return info.finished_at is not None and time.time() - info.finished_at < 0.5
        return False

    def reload_config(self) -> None:
        try:
            config = load_config(self.config_path)
        except ConfigError as exc:
            if not self.config_path.exists():
                config = Config()
            else:
                self.config_error = f"{exc} (keeping the previous configuration)"
                log.error("config reload refused: %s", self.config_error)
                return
        self.config = config
        self.config_error = ""
        self.config_loaded_at = time.time()
        log.info("configuration reloaded from %s", self.config_path)

    # -- connections ----------------------------------------------------------------

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve_connection(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection handler failed")
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _send(self, writer: asyncio.StreamWriter, reply: Reply) -> None:
        writer.write(encode(reply))
        await writer.drain()

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        sock = writer.get_extra_info("socket")
        uid = peer_uid(sock) if sock is not None else None
        if uid is not None and uid != os.getuid():
            log.warning("refused a connection from uid %d", uid)
            await self._send(
                writer,
                ErrorReply(
                    code="denied",
                    message=f"uid {uid} may not use this jarvisd (it serves uid {os.getuid()})",
                ),
            )
            return
        max_bytes = self.config.daemon.max_frame_bytes
        _peer.set(sock)
        while True:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.LimitOverrunError:
                await self._send(
                    writer,
                    ErrorReply(
                        code="frame_too_large",
                        message=f"a request line may be at most {max_bytes} bytes",
                    ),
                )
                return
            except asyncio.IncompleteReadError as exc:
                if exc.partial.strip():
                    await self._send(
                        writer,
                        ErrorReply(
                            code="bad_request", message="the request did not end with a newline"
                        ),
                    )
                return
            if len(line) > max_bytes + 1:
                await self._send(
                    writer,
                    ErrorReply(
                        code="frame_too_large",
                        message=f"a request line may be at most {max_bytes} bytes",
                    ),
                )
                return
            if not line.strip():
                continue
            try:
                request = parse_request(line)
            except ProtocolError as exc:
                code = "version" if "protocol version" in str(exc) else "bad_request"
                await self._send(
                    writer, ErrorReply(id=request_id(line), code=code, message=str(exc))
                )
                continue
            async with contextlib.aclosing(self._dispatch(request)) as replies:
                async for reply in replies:
                    await self._send(writer, reply)
            if isinstance(request, Shutdown):
                return

    async def _dispatch(self, request: Request) -> AsyncGenerator[Reply, None]:
        rid = request.id
        try:
            async with contextlib.aclosing(self._answer(request)) as replies:
                async for reply in replies:
                    yield reply
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as exc:
            if not isinstance(exc, JarvisError):
                log.exception("request %s failed", request.op)
            code, message = to_wire(exc)
            yield ErrorReply(id=rid, code=code, message=message)

    async def _answer(self, request: Request) -> AsyncGenerator[Reply, None]:
        rid = request.id
        if isinstance(request, Ping):
            yield Pong(id=rid, pid=os.getpid(), version=__version__)
        elif isinstance(request, Status):
            yield StatusReply(id=rid, status=self.status())
        elif isinstance(request, Shutdown):
            yield Ok(id=rid, message="shutting down")
            self.should_exit = True
            self._stop.set()
        elif isinstance(request, Ask):
            replies = stream_ask(self.asks, self._asks, request, _peer.get())
            async with contextlib.aclosing(replies):
                async for reply in replies:
                    yield reply
        elif isinstance(request, UiLogin):
            if self.console is None:
                why = (
                    "[ui] enabled is false"
                    if not self.config.ui.enabled
                    else f"port {self.config.ui.port} was not free when jarvisd started ([ui] port)"
                )
                raise UsageError(f"the web console is not running: {why}")
            yield Ok(id=rid, message=self.console.login_url())
        elif isinstance(request, AskCancel):
            cancel = self._asks.get(request.ask)
            if cancel is None:
                raise UsageError(f"no running ask {request.ask!r}")
            cancel.cancel(request.reason)
            yield Ok(id=rid, message="cancelling")
        elif isinstance(request, TaskSubmit):
            yield TaskReply(id=rid, task=await self._submit(request))
        elif isinstance(request, TaskList):
            tasks = self.store.list_tasks(request.states, request.limit)
            yield TaskListReply(id=rid, tasks=tuple(self.tasks.live(t) for t in tasks))
        elif isinstance(request, TaskShow):
            yield TaskReply(id=rid, task=self.tasks.show(request.task))
        elif isinstance(request, TaskCancel):
            info = await self.tasks.cancel(request.task)
            self.watcher.remove(info.id)
            if not info.finished:  # answer once it has really stopped
                stop = TaskWait(task=info.id, timeout=self.tasks.cancel_grace + 3)
                info = await wait_task(self.store, self.tasks, stop)
            yield TaskReply(id=rid, task=info)
        elif isinstance(request, TaskAnswer):
            yield TaskReply(id=rid, task=self.tasks.answer(request.task, request.allow))
        elif isinstance(request, TaskLogs):
            replies = stream_logs(self.store, self.tasks, request)
            async with contextlib.aclosing(replies):
                async for reply in replies:
                    yield reply
        elif isinstance(request, TaskWait):
            async with contextlib.aclosing(stream_wait(self.store, self.tasks, request)) as replies:
                async for reply in replies:
                    yield reply
        else:  # pragma: no cover - parse_request only builds the types above
            raise ProtocolError(f"unhandled op {request.op!r}")

    def status(self) -> DaemonStatus:
        import psutil

        counts = self.store.counts()
        return DaemonStatus(
            pid=os.getpid(),
            version=__version__,
            protocol=PROTOCOL_VERSION,
            started_at=self.started_at,
            uptime_s=time.time() - self.started_at,
            running=self.tasks.running,
            queued=self.tasks.queued,
            memory_bytes=psutil.Process().memory_info().rss,
            max_concurrent=self.config.daemon.max_concurrent,
            max_queued=self.config.daemon.max_queued,
            socket=str(self.paths.socket),
            config_source=self.config.source,
            config_loaded_at=self.config_loaded_at,
            config_error=self.config_error,
            watches=len([k for k in self.watcher.keys if k != _CONFIG_WATCH]),
            tasks_total=sum(counts.values()),
            store_error=self.tasks.store_error,
            stalled=self.tasks.stalled,
        )

    async def _submit(self, request: TaskSubmit) -> TaskInfo:
        from jarvisd.runs import validate_spec

        validate_spec(request.spec, self.config)  # refused now, not when it runs
        # ...as is a task no node of the cluster could run ([cluster] backend).
        backend = backend_for(self.config)
        notice = await asyncio.to_thread(check_placement, backend, request.spec, self.config)
        watch = None
        if request.watch is not None:
            limit = self.config.daemon.watch_max_dirs
            watch = await asyncio.to_thread(_watch_root, request.watch, limit)
        info = self.tasks.submit(request.spec, watch=watch, timeout=request.timeout)
        if watch is not None:
            await self._add_task_watch(info.id, watch)
        return dataclasses.replace(info, notice=notice) if notice else info
