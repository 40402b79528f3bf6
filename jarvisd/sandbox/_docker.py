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
and attached before it starts; the program's stdin is the attach socket. A request with
nothing of its own (:func:`poolable`) takes a container of the warm pool instead
(``_pool``): started and attached earlier, its program waiting for its first frame.

An engine on another machine (``_remote.is_remote``, or ``sandbox.docker_remote``) sees
none of this machine's files: jarvis's code, the inputs and the mounts travel to it as
archives and ``:rw`` mounts come back the same way (``_transfer``, ``_archive``); there
is no warm pool, and what needs this machine's sockets (egress) is refused.

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
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from .._config import Config
from .._errors import SandboxError, SandboxUnavailable
from ..executors import Channel, CodeExecutor, ExecRequest
from ..executors._privsep import ENV as PRIVSEP_ENV
from ._archive import ArchiveLimits
from ._channel import DockerChannel, _remove_tree
from ._covers import covers, make_covers
from ._egress import egress_bind, forward_args, proxy_env
from ._engine import (
    Engine,
    _no_answer,
    _owner,
    _translate,
    connect,
    engine_address,
    engine_named,
    sweep_orphans,
)
from ._handout import claim, handout_dir, kept
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
from ._pool import Pooled, WarmPool, warm_pool
from ._remote import is_remote, transport
from ._staging import can_stage, staged
from ._transfer import Shipment, ship

__all__ = ["DockerChannel", "DockerExecutor", "connect", "engine_address", "sweep_orphans"]

log = logging.getLogger(__name__)

_NO_IMAGE = (
    "sandbox image {image!r} is not present on the engine: run `jarvis sandbox build` "
    "(it builds the image locally, no registry needed)"
)


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
        #: Removals of runs' volumes under way (``_bring_back``).
        self._unshipping: list[threading.Thread] = []
        #: Whether mounts are staged for the engine (decided at the first mount).
        self.staging: bool | None = None
        #: The engine cannot see this machine's files: what a sandbox needs travels as
        #: archives (``_transfer``), never as binds.
        self.archives = config.sandbox.docker_remote or is_remote(self.address)
        self.limits = ArchiveLimits(
            config.sandbox.archive_max_bytes, config.sandbox.archive_max_files
        )

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
            pending, self._unshipping = self._unshipping, []
        for thread in pending:  # they use the client
            thread.join(timeout=2 * self.config.sandbox.engine_timeout)
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
        if self.archives:
            transport(self.config, self.address)  # an engine it must not talk to: that first
            if request.proxy_socket or request.system_binds:
                raise SandboxUnavailable(
                    f"the container engine at {self.address} is on another machine "
                    "(sandbox.docker_remote, or its address): it cannot reach this "
                    "machine's sockets and programs, which "
                    + ("network access (--allow-net)" if request.proxy_socket else "this run")
                    + " needs. Use an engine on this machine for it"
                )
        mounts = self.mounts.check_all(request.mounts)
        loop = asyncio.get_running_loop()
        channel = await asyncio.to_thread(self._start, loop, request, mounts)
        if mounts and not self.archives:
            await confirm_mounts(channel)
        return channel

    # -- container construction (runs in a worker thread) -------------------------------

    @contextlib.contextmanager
    def _engine_sources(
        self, mounts: Sequence[Mount], shipment: Shipment | None
    ) -> Iterator[list[str]]:
        """The path the engine is given for each mount, valid while the block runs:
        its directory in the run's volume on an engine elsewhere; a private bind of
        exactly what was checked when mounts can be staged; else the checked path itself
        (the prelude then refuses it inside if it was swapped)."""
        if shipment is not None:
            yield shipment.mounts
            return
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
        shipment: Shipment | None = None,
    ) -> list[Any]:
        from docker.types import Mount as DockerMount

        specs = []
        if shipment is not None:  # the same binds, of the run's volume on the engine's machine
            binds = list(shipment.code)
            if shipment.inputs:
                binds.append((shipment.inputs, INPUT_DIR, True))
        else:
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
        shipment: Shipment | None = None,
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
        # Shipped mounts are the volume's copies: nothing of the host's to verify inside.
        argv = prelude_argv(
            container_argv(request.argv),
            verify=() if shipment is not None else mounts,
            inputs=inputs is not None,
            forward=forward,
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
            mounts=self._mount_specs(mounts, sources, inputs, system, shipment),
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
        return warm_pool(self.address, self.flavor, size, self._connect, attach_streams)

    async def prepare(self, request: ExecRequest) -> None:
        # (An engine elsewhere: a pooled container would need binds of this machine's.)
        if not poolable(request) or self.config.sandbox.warm_pool == 0 or self.archives:
            return  # only requests that need nothing of their own can use the pool
        await asyncio.to_thread(self._prime, request)

    def _prime(self, request: ExecRequest) -> None:
        import docker.errors

        # Only a head start: when it cannot be had, the session creates its own container.
        try:
            pool = self.pool()
            config = self._configure(request, (), (), None)
            if pool is not None and not kept(handout_dir(self.address, config)):
                pool.prime(config)  # no jarvisd keeps one: this process does
        except (SandboxError, docker.errors.DockerException) as exc:
            log.warning("warm pool: not filled (%s)", exc)

    def _take_pooled(self, config: Mapping[str, Any]) -> Pooled | None:
        """A started container of ``config``, attached: from jarvisd's pool when it keeps
        one (``_handout``), else from this process's; None: start one."""
        if not self.config.sandbox.warm_pool or self.archives:
            return None
        shared = handout_dir(self.address, config)
        taken = self._claim_shared(shared)
        if taken is not None or kept(shared):
            return taken
        pool = self.pool()
        return pool.take(config) if pool is not None else None

    def _claim_shared(self, directory: Path) -> Pooled | None:
        import docker.errors
        import requests.exceptions

        container_id = claim(directory)
        if container_id is None:
            return None
        api = self.client().api
        sock = stdin_sock = None
        try:
            # Attached first, then looked at: an attach to a container that has ended
            # waits for ever, while one that ends after the attach ends the stream.
            sock, stdin_sock = attach_streams(api, container_id)
            if (api.inspect_container(container_id).get("State") or {}).get("Running"):
                return Pooled(container_id, sock, stdin_sock)
            log.info("warm pool: container %s had ended; starting another", container_id[:12])
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            log.warning("warm pool: cannot attach to %s (%s)", container_id[:12], exc)
        if sock is not None:
            Pooled(container_id, sock, stdin_sock).close()
        with contextlib.suppress(
            docker.errors.DockerException, requests.exceptions.RequestException
        ):
            api.remove_container(container_id, force=True)
        return None

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
        covered = covers(targets, policy.uid, policy.gid, ["/tmp"])
        # Named first: a create the engine finishes after we gave up on it can still be
        # found and removed.
        name = f"jarvis-sandbox-{uuid.uuid4().hex[:16]}"
        shipment: Shipment | None = None
        cover_dir: Path | None = None
        try:
            if self.archives:
                labels = {LABEL: "1", OWNER_LABEL: _owner()}
                shipment = ship(
                    api, self.engine, policy, name, labels, self.limits, mounts, inputs, covered
                )
                cover_binds = shipment.covers
            else:
                cover_dir, cover_binds = make_covers(covered)
            with self._engine_sources(mounts, shipment) as sources:
                try:
                    config = self._configure(
                        request, mounts, sources, inputs, cover_binds, shipment
                    )
                    # A pooled container fits only a request with nothing of its own.
                    taken = self._take_pooled(config) if poolable(request) else None
                    if taken is not None:  # started and attached: the run's from now on
                        channel = DockerChannel(
                            loop, api, taken.id, taken.sock, request.timeout, None, policy,
                            self.engine, taken.stdin_sock,
                        )  # fmt: skip
                        channel.scratch = cover_dir
                        return channel
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
                    sock, stdin_sock = attach_streams(api, container_id)
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
            if shipment is not None:
                shipment.remove()
            raise
        channel = DockerChannel(
            loop, api, container_id, sock, request.timeout, inputs, policy, self.engine, stdin_sock
        )
        channel.scratch = cover_dir
        if shipment is not None:
            channel.after = self._bring_back(shipment)
        return channel

    def _bring_back(self, shipment: Shipment) -> Callable[[bool], None]:
        def after(stalled: bool) -> None:
            try:
                if not stalled:  # (the engine would not answer: its files are lost with it)
                    shipment.bring_back()
            finally:
                # Not on the run's time (two engine calls, about a second on a loaded
                # machine); close() waits for it, and what a crash leaves is swept at
                # the daemon's next start.
                thread = threading.Thread(target=shipment.remove, name="sandbox-unship")
                with self._lock:
                    self._unshipping = [t for t in self._unshipping if t.is_alive()]
                    self._unshipping.append(thread)
                thread.start()

        return after


def poolable(request: ExecRequest) -> bool:
    """Whether ``request`` may run in a pooled container: it needs nothing of its own
    (files, mounts, binds, egress, environment), so an idle container made before the
    run holds nothing of it, no secret in its environment among them."""
    return not (
        request.files
        or request.mounts
        or request.system_binds
        or request.proxy_socket
        or request.env
        or request.separate_code
    )


def attach_streams(api: Any, container_id: str) -> tuple[Any, Any]:
    """The container's attach stream, and its stdin's own when it needs one (else None).

    Over TLS (a tcp:// engine) the program's end of input cannot be a half-close of the
    one stream: Python's ``SSLSocket.shutdown`` drops the TLS state, and the output can
    no longer be read. So its stdin gets a stream of its own, closed whole at the end of
    input (``StdinOnce``: the engine closes the program's stdin when it goes)."""
    if not api.base_url.startswith("https://"):
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        return api.attach_socket(container_id, params=params), None
    out = api.attach_socket(container_id, params={"stdout": 1, "stderr": 1, "stream": 1})
    try:
        return out, api.attach_socket(container_id, params={"stdin": 1, "stream": 1})
    except BaseException:
        out.close()
        raise


def _write_inputs(files: Mapping[str, str], policy: SandboxPolicy) -> Path:
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


def podman_executor(config: Config) -> DockerExecutor:
    """The podman backend (``sandbox.backend = "podman"``): its Docker-compatible socket."""
    return DockerExecutor(config, flavor="podman")
