"""The container backend: a hardened ``ContainerRunner`` over the ``docker`` SDK.

Works with dockerd and with podman's Docker-compatible socket. Engine address: config
``sandbox.docker_host``, else DOCKER_HOST (podman: CONTAINER_HOST, then its default
socket), else the engine's default socket.

Every container gets the :class:`SandboxPolicy`: ``--network none`` (a run that allows
hosts gets its egress proxy's socket and a forwarder to it, never an interface:
``_egress``), read-only root,
tmpfs /tmp, ``cap_drop ALL``, no-new-privileges, a non-root user, pids/memory/CPU
limits, an init process, logging off (output never lands on the host's disk), checked
non-recursive bind mounts, the ``jarvis.sandbox`` label. It is created (never pulled)
and attached before it starts; the program's stdin is the attach socket.

Mounts hold against swaps between the check and the engine's bind (the engine resolves
path strings itself): as root, with the engine in our mount namespace, the engine is
given private binds of exactly what was checked (``_staging``); always, the prelude
checks inside the container, before the program starts, that every mount is the object
that was checked, and :meth:`DockerExecutor.open` raises MountRefused when it is not.

Engine traps handled here (measured on engine 20.10 / SDK 7.2):
* ``:ro`` binds are not recursive: binds are made non-recursive, so a mount nested
  under a read-only directory is simply not there inside.
* the SDK's stream iterator ignores socket timeouts and a blocked stdin write never
  returns: a watchdog thread enforces the deadline by shutting the attach socket first,
  then force-removing the container; cleanup joins the watchdog to avoid 409 races.
* the attach stream only closes the program's stdin with ``StdinOnce``, which the SDK's
  ``create`` does not take: it is set on the raw config.
* an engine that stops answering (stopped, paused, wedged) would hang every call and
  every stream. Short calls (create, start, inspect, remove, ping) have
  ``sandbox.engine_timeout``; streams do not, so while a container's output is silent
  the reader pings the engine every PROBE_AFTER_S. No answer in time: the channel fails
  with SandboxUnavailable naming the engine, and what the run could not remove (a
  container, or one whose create was under way: containers are named before they are
  created) is removed by ``_reaper`` when the engine answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .._config import Config
from .._errors import SandboxError, SandboxUnavailable
from ..executors import Channel, Clock, CodeExecutor, ExecRequest, ExecResult
from ..executors._privsep import ENV as PRIVSEP_ENV
from ..protocol import MAX_FRAME_BYTES
from ._covers import covers, make_covers
from ._egress import egress_bind, forward_args, proxy_env
from ._mounts import Mount, MountPolicy
from ._policy import (
    CODE_ROOT,
    CODE_UID,
    INPUT_DIR,
    LABEL,
    OWNER_LABEL,
    SandboxPolicy,
    code_dirs,
    confirm_mounts,
    container_argv,
    ensure_bytecode,
    prelude_argv,
)
from ._pool import WarmPool, warm_pool
from ._reaper import remove_later
from ._staging import can_stage, pid_alive, staged

__all__ = ["DockerChannel", "DockerExecutor", "connect", "engine_address", "sweep_orphans"]

log = logging.getLogger(__name__)

_STDERR_TAIL = 64 * 1024
_REST_LIMIT = 8 * 1024 * 1024
_QUEUE_CHUNKS = 256
#: A container's output silent this long makes the reader ask whether the engine still
#: answers (a ping: cheap, so an idle session may ask every few seconds).
PROBE_AFTER_S = 5.0
_NO_IMAGE = (
    "sandbox image {image!r} is not present on the engine: run `jarvis sandbox build` "
    "(it builds the image locally, no registry needed)"
)


def engine_address(config: Config, flavor: str = "docker") -> str:
    """Where the container engine listens ("" = the SDK's default for docker)."""
    if config.sandbox.docker_host:
        return config.sandbox.docker_host
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    if flavor == "podman":
        if os.environ.get("CONTAINER_HOST"):
            return os.environ["CONTAINER_HOST"]
        if os.getuid() == 0:
            return "unix:///run/podman/podman.sock"
        runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
        return f"unix://{runtime}/podman/podman.sock"
    return ""


def engine_named(config: Config, flavor: str = "docker") -> str:
    """Where the engine is, and which setting says so, for messages."""
    address = engine_address(config, flavor)
    if config.sandbox.docker_host:
        return f"sandbox.docker_host={address}"
    if address and os.environ.get("DOCKER_HOST") == address:
        return f"DOCKER_HOST={address}"
    return address or "the default Docker socket"


@dataclass(frozen=True, slots=True)
class Engine:
    """The engine a channel's container runs on, for telling and handling a stall."""

    address: str
    named: str
    timeout: float
    connect: Callable[[], Any]

    def stalled(self, doing: str = "") -> SandboxUnavailable:
        what = f" while trying to {doing}" if doing else ""
        return SandboxUnavailable(
            f"the container engine stopped answering ({self.named}): no reply within "
            f"{self.timeout:g} s (sandbox.engine_timeout){what}; the run's containers are "
            "removed when it answers again"
        )

    def remove_later(self, ref: str) -> None:
        remove_later(self.address, self.connect, ref)


def _no_answer(exc: BaseException) -> bool:
    """Whether ``exc`` says the engine did not answer (rather than answered no)."""
    import requests.exceptions

    return isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout)


def connect(config: Config, flavor: str = "docker", timeout: float = 60.0) -> Any:
    """A connected ``docker.DockerClient``, or SandboxUnavailable saying what to do."""
    import docker
    import docker.errors
    import requests.exceptions

    address = engine_address(config, flavor)
    where = address or "the default Docker socket"
    socket_path = (address or "unix:///var/run/docker.sock").removeprefix("unix://")
    if "://" not in socket_path and not os.path.exists(socket_path):
        # Checked first: the SDK leaks the socket of a failed unix connection.
        raise SandboxUnavailable(
            f"no container engine at {where}: {socket_path} does not exist; start one (for "
            "development: packaging/dev/docker-up.sh, then export the DOCKER_HOST it prints) "
            'or set sandbox.backend = "bwrap"'
        )
    client = None
    try:
        # Negotiate the API version ourselves (what version="auto" does) so a failed
        # attempt can close its connection instead of leaking it.
        client = docker.DockerClient(base_url=address or None, version="1.41", timeout=timeout)
        client.api._version = str(client.api.version(api_version=False)["ApiVersion"])
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        if client is not None:
            client.close()
        raise SandboxUnavailable(
            f"no container engine answers at {where} ({exc}); start one (for development: "
            "packaging/dev/docker-up.sh, then export the DOCKER_HOST it prints) or set "
            'sandbox.backend = "bwrap"'
        ) from exc
    return client


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def sweep_orphans(
    config: Config | None = None, *, everything: bool = False, client: Any = None
) -> list[str]:
    """Remove labelled containers whose owning process is gone (``everything``: all
    labelled containers). Returns the removed ids. The daemon calls this at start."""
    import docker.errors
    import requests.exceptions

    own_client = client is None
    if client is None:
        from .._config import load_config

        config = config or load_config()
        # The engine of the configured backend: a podman socket is not DOCKER_HOST's.
        flavor = "podman" if config.sandbox.backend == "podman" else "docker"
        client = connect(config, flavor, timeout=config.sandbox.engine_timeout)
    host = socket.gethostname()
    removed = []
    try:
        try:
            found = client.api.containers(all=True, filters={"label": f"{LABEL}=1"})
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise SandboxUnavailable(f"cannot list sandbox containers: {exc}") from exc
        for info in found:
            owner = (info.get("Labels") or {}).get(OWNER_LABEL, "")
            if not everything and _owner_alive(owner, host):
                continue
            with contextlib.suppress(
                docker.errors.DockerException, requests.exceptions.RequestException
            ):
                client.api.remove_container(info["Id"], force=True)
                removed.append(info["Id"])
    finally:
        if own_client:
            client.close()
    return removed


def _owner_alive(owner: str, host: str) -> bool:
    owner_host, _, pid_text = owner.rpartition(":")
    return owner_host == host and pid_text.isdigit() and pid_alive(int(pid_text))


class DockerExecutor(CodeExecutor):
    """Runs each request in a fresh hardened container (``ContainerRunner``)."""

    name: ClassVar[str] = "docker"
    isolated: ClassVar[bool] = True

    def __init__(
        self, config: Config, *, flavor: str = "docker", policy: SandboxPolicy | None = None
    ) -> None:
        self.config = config
        self.flavor = flavor
        self.name = flavor  # type: ignore[misc]
        self.policy = policy or SandboxPolicy.from_config(config)
        self.address = engine_address(config, flavor)
        sensitive = (
            [self.address.removeprefix("unix://")] if self.address.startswith("unix://") else []
        )
        self.mounts = MountPolicy(
            config.sandbox.allowed_roots,
            extra_sensitive=[*sensitive, "/var/run/docker.sock", "/run/podman"],
            max_scan_entries=config.sandbox.max_mount_entries,
        )
        self.engine = Engine(
            self.address,
            engine_named(config, flavor),
            config.sandbox.engine_timeout,
            self._connect,
        )
        self._client: Any = None
        self._lock = threading.Lock()
        #: Whether mounts are staged for the engine (decided at the first mount).
        self.staging: bool | None = None

    def _connect(self) -> Any:
        # Every call but the streams is bounded: a stalled engine fails the run, not hangs it.
        return connect(self.config, self.flavor, timeout=self.config.sandbox.engine_timeout)

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    async def check(self) -> None:
        await asyncio.to_thread(self._check)

    def _check(self) -> None:
        import docker.errors

        try:
            self.client().api.inspect_image(self.policy.image)
        except docker.errors.ImageNotFound:
            raise SandboxUnavailable(_NO_IMAGE.format(image=self.policy.image)) from None
        except Exception as exc:
            if _no_answer(exc):
                raise self.engine.stalled("look up the sandbox image") from exc
            raise

    async def open(self, request: ExecRequest) -> Channel:
        if not request.argv:
            raise SandboxError("nothing to run: empty argv")
        mounts = self.mounts.check_all(request.mounts)
        loop = asyncio.get_running_loop()
        channel = await asyncio.to_thread(self._start, loop, request, mounts)
        if mounts:
            await confirm_mounts(channel)
        return channel

    # -- container construction (runs in a worker thread) -------------------------------

    @contextlib.contextmanager
    def _engine_sources(self, mounts: Sequence[Mount]) -> Iterator[list[str]]:
        """The path the engine is given for each mount, valid while the block runs:
        a private bind of exactly what was checked when mounts can be staged, else the
        checked path itself (the prelude then refuses it inside if it was swapped)."""
        if mounts and self.staging is None:
            self.staging = can_stage(self.address)
        if mounts and self.staging:
            with staged(mounts) as sources:
                yield sources
        else:
            yield [str(m.source) for m in mounts]

    def _mount_specs(
        self,
        mounts: Sequence[Mount],
        sources: Sequence[str],
        inputs: Path | None,
        system: Sequence[tuple[str, str, bool]] = (),
    ) -> list[Any]:
        from docker.types import Mount as DockerMount

        specs = []
        code = code_dirs()
        ensure_bytecode(code)
        binds = [(str(p), f"{CODE_ROOT}/{n}", True) for n, p in sorted(code.items())]
        if inputs is not None:
            binds.append((str(inputs), INPUT_DIR, True))
        binds += [(src, m.target, m.read_only) for m, src in zip(mounts, sources, strict=True)]
        binds += list(system)
        for source, target, read_only in binds:
            spec = DockerMount(target, source, type="bind", read_only=read_only)
            # Non-recursive: mounts nested under an allowed directory stay outside
            # (engine 20.10's `readonly` alone would leave them writable).
            spec["BindOptions"] = {"NonRecursive": True}
            specs.append(spec)
        return specs

    def _configure(
        self,
        request: ExecRequest,
        mounts: Sequence[Mount],
        sources: Sequence[str],
        inputs: Path | None,
        extra: Sequence[tuple[str, str, bool]] = (),
    ) -> dict[str, Any]:
        """The engine's container configuration for ``request`` (no I/O); ``extra``:
        more binds of jarvis's own (covers)."""
        from docker.types import LogConfig, Ulimit

        api = self.client().api
        policy = self.policy
        env = {
            "PYTHONPATH": CODE_ROOT,
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOME": "/tmp",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            **request.env,
        }
        # The run's egress, when it allows hosts: still no network interface
        # (network_mode none below), only the proxy's socket and a forwarder to it.
        forward: Sequence[str] = ()
        system = [*request.system_binds, *extra]
        if request.proxy_socket:
            env.update(proxy_env())
            forward = forward_args(policy.uid, policy.gid)
            system.append(egress_bind(request.proxy_socket))
        argv = prelude_argv(
            container_argv(request.argv), verify=mounts, inputs=inputs is not None, forward=forward
        )
        # A program that runs untrusted code of its own (the agent runner) starts as
        # root with only SETUID/SETGID and drops to the sandbox user itself at once;
        # the container's init stays root, out of its code's reach (executors._privsep).
        user, cap_add = f"{policy.uid}:{policy.gid}", None
        if request.separate_code:
            user, cap_add = "0:0", ["SETUID", "SETGID"]
            code_uid = CODE_UID if policy.uid != CODE_UID else CODE_UID + 1
            env[PRIVSEP_ENV] = f"{policy.uid}:{policy.gid}:{code_uid}"
        host_config = api.create_host_config(
            network_mode="none",
            read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={policy.tmp_bytes},mode=1777"},
            cap_drop=["ALL"],
            cap_add=cap_add,
            security_opt=["no-new-privileges"],
            pids_limit=policy.pids,
            mem_limit=policy.memory_bytes,
            memswap_limit=policy.memory_bytes,
            nano_cpus=int(policy.cpus * 1e9),
            init=True,
            ipc_mode="private",
            ulimits=[Ulimit(name="core", soft=0, hard=0)],
            log_config=LogConfig(type="none"),
            mounts=self._mount_specs(mounts, sources, inputs, system),
        )
        container_config: dict[str, Any] = api.create_container_config(
            policy.image,
            argv,
            hostname="sandbox",
            user=user,
            stdin_open=True,
            environment=env,
            network_disabled=True,
            working_dir="/tmp",
            host_config=host_config,
            labels={LABEL: "1", OWNER_LABEL: _owner()},
        )
        # Closing our end of the attach stream closes the program's stdin.
        container_config["StdinOnce"] = True
        return container_config

    def pool(self) -> WarmPool | None:
        """This process's warm pool for this engine, when ``sandbox.warm_pool`` is on."""
        size = self.config.sandbox.warm_pool
        if not size:
            return None
        return warm_pool(self.address, self.flavor, size, self._connect)

    async def prepare(self, request: ExecRequest) -> None:
        if (
            request.files
            or request.mounts
            or request.proxy_socket
            or self.config.sandbox.warm_pool == 0
        ):
            return  # only requests that need nothing of their own can use the pool
        await asyncio.to_thread(self._prime, request)

    def _prime(self, request: ExecRequest) -> None:
        import docker.errors

        # Only a head start: when it cannot be had, the session creates its own container.
        try:
            pool = self.pool()
            if pool is not None:
                pool.prime(self._configure(request, (), (), None))
        except (SandboxError, docker.errors.DockerException) as exc:
            log.warning("warm pool: not filled (%s)", exc)

    def _start(
        self, loop: asyncio.AbstractEventLoop, request: ExecRequest, mounts: Sequence[Mount]
    ) -> DockerChannel:
        import docker.errors

        api = self.client().api
        policy = self.policy
        inputs = _write_inputs(request.files, policy) if request.files else None
        # Private directories above a mount (root's 0700 home): a traversable empty
        # directory over each, so the sandbox user reaches the mount (``_covers``).
        targets = [*(str(m.target) for m in mounts), *(t for _, t, _ in request.system_binds)]
        cover_dir, cover_binds = make_covers(covers(targets, policy.uid, policy.gid, ["/tmp"]))
        try:
            with self._engine_sources(mounts) as sources:
                try:
                    config = self._configure(request, mounts, sources, inputs, cover_binds)
                    # A pooled container fits only a request with nothing of its own.
                    pool = (
                        self.pool()
                        if not mounts
                        and inputs is None
                        and not request.system_binds
                        and not request.proxy_socket
                        else None
                    )
                    container_id = pool.take(config) if pool is not None else None
                    if container_id is None:
                        # Named first: a create the engine finishes after we gave up on
                        # it can still be found and removed.
                        name = f"jarvis-sandbox-{uuid.uuid4().hex[:16]}"
                        try:
                            container_id = api.create_container_from_config(config, name)["Id"]
                        except Exception as exc:
                            if _no_answer(exc):
                                self.engine.remove_later(name)
                                raise self.engine.stalled("create a container") from exc
                            raise
                except docker.errors.ImageNotFound as exc:
                    raise SandboxUnavailable(_NO_IMAGE.format(image=policy.image)) from exc
                except docker.errors.DockerException as exc:
                    raise _translate(exc, "create the sandbox container") from exc
                try:
                    sock = api.attach_socket(
                        container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
                    )
                    # The container's mounts are made here: staged ones may go after.
                    api.start(container_id)
                except Exception as exc:
                    if _no_answer(exc):
                        self.engine.remove_later(container_id)
                        raise self.engine.stalled("start a container") from exc
                    with contextlib.suppress(docker.errors.DockerException):
                        api.remove_container(container_id, force=True)
                    if isinstance(exc, docker.errors.DockerException):
                        raise _translate(exc, "start the sandbox container") from exc
                    raise
        except BaseException:
            _remove_tree(inputs)
            _remove_tree(cover_dir)
            raise
        channel = DockerChannel(
            loop, api, container_id, sock, request.timeout, inputs, policy, self.engine
        )
        channel.scratch = cover_dir
        return channel


def _translate(exc: Exception, doing: str) -> SandboxError:
    import docker.errors
    import requests.exceptions

    if isinstance(exc, requests.exceptions.ConnectionError):
        return SandboxUnavailable(f"cannot {doing}: the container engine stopped answering")
    if isinstance(exc, docker.errors.APIError):
        return SandboxError(f"cannot {doing}: {exc.explanation or exc}")
    return SandboxError(f"cannot {doing}: {exc}")


def _write_inputs(files: Any, policy: SandboxPolicy) -> Path:
    root = Path(tempfile.mkdtemp(prefix="jarvis-in-"))
    base = root.resolve()
    try:
        for name, text in files.items():
            target = (root / name).resolve()
            if not target.is_relative_to(base) or target == base:
                raise SandboxError(f"refused to write {name!r} outside the working directory")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        # Readable by the sandbox user whatever our umask.
        for dirpath, _dirs, names in os.walk(root):
            os.chmod(dirpath, 0o755)
            for n in names:
                os.chmod(os.path.join(dirpath, n), 0o644)
    except BaseException:
        _remove_tree(root)
        raise
    return root


def _remove_tree(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


class DockerChannel(Channel):
    """A started container. stdout arrives through a bounded queue (a reader thread
    demultiplexes the attach stream), so a chatty program waits for us rather than
    filling the host's memory."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        api: Any,
        container_id: str,
        sock: Any,
        timeout: float,
        inputs: Path | None,
        policy: SandboxPolicy,
        engine: Engine | None = None,
    ) -> None:
        self.loop = loop
        self.engine = engine
        #: Set when the engine stopped answering: readline raises it from then on.
        self.stalled: SandboxUnavailable | None = None
        self.api = api
        self.id = container_id
        self.policy = policy
        self.timeout = timeout
        self.clock = Clock(timeout)
        self.start = time.monotonic()
        self.reason = ""
        self._sock = sock
        self._raw: socket.socket = getattr(sock, "_sock", sock)
        self._inputs = inputs
        #: A host directory of this container's own (its covers), removed with it.
        self.scratch: Path | None = None
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue(_QUEUE_CHUNKS)
        self._buf = bytearray()
        self._eof = False
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self._send_lock = threading.Lock()
        self._kill_lock = threading.Lock()
        self._removed = False
        self._stdin_closed = False
        self._done = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, name="sandbox-read", daemon=True)
        self._watchdog = threading.Thread(target=self._watch, name="sandbox-watch", daemon=True)
        self._reader.start()
        self._watchdog.start()

    # -- threads ---------------------------------------------------------------------

    def _recv_exact(self, n: int) -> bytes | None:
        chunks = []
        while n:
            if not self._readable():
                return None
            data = self._raw.recv(min(n, 1 << 16))
            if not data:
                return None
            chunks.append(data)
            n -= len(data)
        return b"".join(chunks)

    def _read_loop(self) -> None:
        try:
            while True:
                header = self._recv_exact(8)
                if header is None:
                    break
                size = int.from_bytes(header[4:8], "big")
                data = self._recv_exact(size) if size else b""
                if data is None:
                    break
                if header[0] == 2:
                    self._keep_stderr(data)
                elif data and not self._push(data):
                    break
        except OSError:
            pass
        finally:
            self._push(None)

    def _readable(self) -> bool:
        """Wait for output. While none comes, ask every PROBE_AFTER_S whether the engine
        still answers: a stalled engine sends nothing, and the stream has no timeout of
        its own. False: it stopped answering (``stalled`` is set)."""
        if self.engine is None:  # nothing to ask (a channel made by hand)
            return True
        while not select.select([self._raw], [], [], PROBE_AFTER_S)[0]:
            if self._removed:
                return True  # the socket is shut: recv says so
            if not self._engine_answers():
                return False
        return True

    def _engine_answers(self) -> bool:
        import docker.errors
        import requests.exceptions

        try:
            self.api.ping()  # bounded by sandbox.engine_timeout (the client's timeout)
            return True
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            self._mark_stalled(exc)
            return False

    def _mark_stalled(self, exc: BaseException) -> None:
        if self.stalled is None:
            self.stalled = (
                self.engine.stalled()
                if self.engine is not None
                else SandboxUnavailable("the container engine stopped answering")
            )
            log.warning("sandbox container %s: %s (%s)", self.id[:12], self.stalled, exc)

    def _push(self, item: bytes | None) -> bool:
        """Hand a chunk to the event loop, waiting while the queue is full. One put
        per chunk, waited on until it lands: a put that has started cannot be taken
        back, so putting again after a timeout would deliver the chunk twice."""
        try:
            future = asyncio.run_coroutine_threadsafe(self._queue.put(item), self.loop)
        except RuntimeError:  # the loop is closed: nobody will read
            return False
        while True:
            try:
                future.result(timeout=1.0)
                return True
            except TimeoutError:
                if self._removed:
                    future.cancel()
                    return False
            except Exception:
                return False

    def _keep_stderr(self, data: bytes) -> None:
        self._stderr.append(data)
        self._stderr_size += len(data)
        while self._stderr_size > _STDERR_TAIL and len(self._stderr) > 1:
            self._stderr_size -= len(self._stderr.popleft())

    def _watch(self) -> None:
        # Sleep until the deadline (or, while the host answers an inference request, a
        # short while), then look again.
        while (delay := self.clock.due_in()) > 0:
            if self._done.wait(delay):
                return
        if not self._done.is_set() and self.stalled is None:
            log.info("sandbox container %s timed out after %.1fs", self.id[:12], self.timeout)
            self._terminate("timeout")

    def _terminate(self, reason: str) -> None:
        import docker.errors

        with self._kill_lock:
            if reason and not self.reason:
                self.reason = reason
            if self._removed:
                return
            self._removed = True
            # Shut the socket first: it unblocks a stuck stdin write and the reader, and
            # a removal with the attach stream open can hang.
            with contextlib.suppress(OSError):
                self._raw.shutdown(socket.SHUT_RDWR)
            if self.stalled is not None:  # no use waiting for it again
                self._remove_later()
                return
            try:
                self.api.remove_container(self.id, force=True)
            except Exception as exc:
                # (requests' errors are OSErrors too: look at them first)
                if _no_answer(exc):
                    self._mark_stalled(exc)
                    self._remove_later()
                elif not isinstance(exc, docker.errors.DockerException | OSError):
                    raise

    def _remove_later(self) -> None:
        if self.engine is not None:
            self.engine.remove_later(self.id)

    # -- Channel ---------------------------------------------------------------------

    async def write(self, data: bytes) -> None:
        if self.stalled is not None:
            raise SandboxUnavailable(str(self.stalled))
        if self._stdin_closed or self._removed:
            raise SandboxError(
                f"the sandboxed program's stdin is closed ({self.reason or 'ended'})"
            )
        try:
            await asyncio.to_thread(self._send, data)
        except OSError as exc:
            raise SandboxError(
                f"the sandboxed program stopped reading its input ({self.reason or 'exited'})"
            ) from exc

    def _send(self, data: bytes) -> None:
        with self._send_lock:
            self._raw.sendall(data)

    async def close_stdin(self) -> None:
        if self._stdin_closed:
            return
        self._stdin_closed = True
        with self._send_lock, contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_WR)

    async def readline(self, limit: int = MAX_FRAME_BYTES + 1) -> bytes:
        start = 0
        while True:
            idx = self._buf.find(b"\n", start)
            if idx >= 0 and idx < limit:
                line = bytes(self._buf[: idx + 1])
                del self._buf[: idx + 1]
                return line
            if len(self._buf) >= limit or (self._eof and self._buf):
                line = bytes(self._buf[:limit])
                del self._buf[:limit]
                return line
            if self._eof:
                if self.stalled is not None:
                    raise SandboxUnavailable(str(self.stalled))
                return b""
            start = len(self._buf)
            chunk = await self._queue.get()
            if chunk is None:
                self._eof = True
            else:
                self._buf += chunk

    async def _drain(self) -> bytes:
        rest = bytearray(self._buf)
        self._buf.clear()
        while not self._eof:
            chunk = await self._queue.get()
            if chunk is None:
                self._eof = True
            elif len(rest) < _REST_LIMIT:
                rest += chunk
        return bytes(rest[:_REST_LIMIT])

    async def _reap(self) -> ExecResult:
        rest = await self._drain()
        code, oom = await asyncio.to_thread(self._finish)
        reason = self.reason or ("oom" if oom else "")
        stderr = b"".join(self._stderr).decode("utf-8", "replace")
        note = ""
        if self.stalled is not None:
            reason = "stalled"
            note = f"[sandbox] {self.stalled}"
        elif reason == "oom":
            note = (
                f"[sandbox] out of memory: the program exceeded the sandbox memory limit of "
                f"{self.policy.memory_text} (sandbox.memory) and was killed"
            )
        elif reason == "timeout":
            note = f"[sandbox] timed out after {self.timeout:g}s: the container was removed"
        if note:
            stderr += ("\n" if stderr and not stderr.endswith("\n") else "") + note + "\n"
        return ExecResult(
            exit_code=code,
            stdout=rest.decode("utf-8", "replace"),
            stderr=stderr,
            timed_out=reason == "timeout",
            reason=reason,
            duration_s=time.monotonic() - self.start,
        )

    def _finish(self) -> tuple[int, bool]:
        """Exit code and OOM flag; then stop the watchdog and remove the container."""
        import docker.errors
        import requests.exceptions

        code, oom = 137, False
        if not self._removed and self.stalled is None:
            try:
                status = self.api.wait(self.id, timeout=self.timeout + 30)
                code = int(status.get("StatusCode", 137))
                if code == 137:  # SIGKILL: the memory limit, or something else?
                    state = self.api.inspect_container(self.id).get("State") or {}
                    oom = bool(state.get("OOMKilled"))
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                code = 137  # removed under us (timeout or kill)
        self._done.set()
        self._watchdog.join()
        self._terminate("")
        self._reader.join(timeout=5)
        # The SDK keeps the attach request's HTTP response on the socket; closed after
        # the socket, it fails at garbage collection ("I/O operation on closed file").
        response = getattr(self._sock, "_response", None)
        if response is not None:
            with contextlib.suppress(OSError, ValueError):
                response.close()
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(OSError):
            self._raw.close()
        _remove_tree(self._inputs)
        _remove_tree(self.scratch)
        return code, oom

    async def kill(self, reason: str = "killed") -> None:
        if self._removed:
            return
        await asyncio.to_thread(self._terminate, reason)


def podman_executor(config: Config) -> DockerExecutor:
    """The podman backend (``sandbox.backend = "podman"``): its Docker-compatible socket."""
    return DockerExecutor(config, flavor="podman")
