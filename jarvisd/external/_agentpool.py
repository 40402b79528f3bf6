"""Sandboxed external agents started ahead: jarvisd keeps ``agents.warm`` idle slots per
agent that opts in (:data:`POOLED`), and a `jarvis ask --agent` run claims one instead
of starting a container and the agent on its clock.

A slot is a sandbox container (the agent's usual policy and binds) whose forwarder has
its start frame and whose agent is spawned with its ACP ``initialize`` answered. It holds
nothing of any run:

* its gateway token is minted with the slot (the agent reads it at its start) and kept
  in the slot's file, in jarvis's private runtime directory; the claiming run's gateway
  adopts it (``Gateway(token=)``). While no gateway listens the token opens nothing, the
  gateway dies with the run, and a slot is never claimed twice, so it reaches no other
  run's gateway;
* its gateway socket's directory (``sock/``, root's, 0711, bound read-only at
  :data:`GATEWAY_DIR`): the claiming run's gateway binds its socket there. Root's so the
  agent, which may write its HOME, cannot plant a link where the gateway chowns;
* its model name is :data:`SLOT_MODEL`: the gateway serves the run's model whatever an
  agent asks for. opencode also picks its system prompt by that name: a run whose model
  name picks another (``gpt-4o``, ``claude-...``: :func:`fits_model`) takes the usual
  start; its context window is not in its config (it never compacts on its own), so
  nothing else of the model is;
* its permissions and tools (opencode's are in its config): those of a run without
  ``--tools`` and without egress, the only runs that claim a slot;
* its workspace: each ``:rw`` root of ``sandbox.allowed_roots`` is, in the container, an
  empty directory of the slot's (``ws/N``, root's) bound with ``rslave`` propagation.
  At claim the run's workspace passes the same allowlist check as any mount, is opened
  again without following a link (``_mounts.pin``) and bind-mounted from that descriptor
  at its own path under ``ws/N``: the mount propagates into the container, where the
  workspace appears at its own path. It is detached when the run ends. The pool's
  directory is a shared mount for that (made so at the keeper's start).

opencode does most of its start at its first ``session/new`` (3.4 CPU-seconds, then
0.6 for each new directory, 0.03 for one it has seen): with ``sandbox.memory`` of 1 GiB
or more (:data:`WARM_UP_MEMORY`) a slot opens one session in an empty directory of its
own HOME (``warm``) before it is ready, never prompted; the run opens its own, whose
updates its client alone takes (they name their session).

A slot is used once: the run's container is removed at its end like any other, and the
keeper (``_handout.PoolKeeper``: the hand-over by rename, the refill, the check of dead
takers) starts the next. Root only, with the engine in jarvisd's mount namespace (as for
staged mounts); a run the slot's launch does not fit (``--tools``, ``--mount``, a copied
workspace, egress, a toolchain, a daemon task, one under no ``:rw`` root) takes the
usual path. The workspace's own ``.git`` is mounted read-only over it at claim, as on
the usual start (made read-only before it is moved there: a mount propagates with the
flags it has then).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import secrets
import shutil
import struct
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._config import Config
from .._errors import MountRefused, SandboxError
from . import _slotmounts as mounts
from ._registry import AgentDefinition, GatewayAccess, Setup

if TYPE_CHECKING:
    from ..executors import Channel
    from ..sandbox import DockerExecutor

__all__ = [
    "GATEWAY_DIR",
    "POOLED",
    "SLOT_MODEL",
    "Claimed",
    "Slot",
    "SlotMaker",
    "attach_slot",
    "claim_slot",
    "fits_memory",
    "fits_model",
    "fits_slot",
    "fits_socket",
    "pool_base",
    "pool_dir",
    "release",
    "sweep_slots",
    "unshare_base",
    "workspace_in",
]

log = logging.getLogger(__name__)

#: The agents whose idle start is pooled (their start reads nothing of a run).
POOLED = frozenset({"codex", "opencode"})
#: Agents that do most of their start's work at their first ``session/new``, not at
#: ``initialize`` (opencode: 3.4 CPU-seconds there, then 0.6 for each new directory): a
#: slot opens one session of its own, in an empty directory of its HOME (``warm``),
#: never used by any run.
WARM_UP_SESSION = frozenset({"opencode"})
#: The container memory a warm-up session needs: its instance stays, and with the run's
#: own beside it opencode went past 512 MiB (killed by the memory cgroup) where alone it
#: peaks at 392 to 409 MiB. Under it a slot has no warm-up session.
WARM_UP_MEMORY = 1 << 30
#: Where a slot's gateway socket directory is, in its container.
GATEWAY_DIR = "/run/jarvis-gateway"
SOCKET_NAME = "gw.sock"
#: The longest path a Unix socket may have (sun_path, with its NUL).
MAX_SOCKET_PATH = 107
#: The model name a slot's agent is configured with (the gateway serves the run's).
SLOT_MODEL = "jarvis"
#: How long an idle agent has to answer ``initialize``.
INITIALIZE_TIMEOUT_S = 60.0
#: The initialize a slot's agent is sent: what ``_session.converse`` sends.
_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": 1,
        "clientCapabilities": {
            "fs": {"readTextFile": True, "writeTextFile": True},
            "terminal": False,
        },
    },
}


@dataclass(frozen=True, slots=True)
class Slot:
    """A claimed slot: its container and what the run adopts."""

    id: str
    dir: Path
    token: str
    #: (a ``:rw`` allowed root, the slot's directory bound at its path inside).
    roots: tuple[tuple[str, str], ...]

    @property
    def home(self) -> Path:
        return self.dir / "home"

    @property
    def sock_dir(self) -> Path:
        return self.dir / "sock"

    @property
    def socket_name(self) -> str:
        return SOCKET_NAME


@dataclass(frozen=True, slots=True)
class Claimed:
    """A claimed slot, attached: its channel and the executor that opened it."""

    slot: Slot
    executor: DockerExecutor
    channel: Channel


def pool_base() -> Path:
    from .._paths import paths

    return paths().runtime / "agent-pool"


def _rw_roots(config: Config) -> list[str]:
    from ..sandbox._mounts import MountPolicy

    roots = MountPolicy(config.sandbox.allowed_roots).allowed_roots()
    return sorted({str(r.path) for r in roots if r.writable})


def pool_dir(config: Config, agent: AgentDefinition, where: Path) -> Path:
    """The hand-over directory of ``agent``'s slots for this configuration: a run whose
    configuration differs (image, limits, roots) finds none and starts its own."""
    from ..sandbox._engine import engine_address

    text = json.dumps(
        [
            engine_address(config, config.sandbox.backend),
            repr(config.sandbox),
            agent.name,
            str(where),
            config.agents.warm,
        ]
    )
    return pool_base() / f"{agent.name}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def share_base(base: Path | None = None) -> None:
    """The pool's directory made a shared mount, for its slots' workspaces."""
    mounts.share(base or pool_base())


def unshare_base(base: Path | None = None) -> None:
    """The pool's shared mount gone (jarvisd stops: its slots are removed)."""
    base = base or pool_base()
    sweep_slots(base)
    mounts.unshare(base)


def sweep_slots(base: Path | None = None) -> None:
    """Detach every mount under the pool and remove the slots' directories: what a
    jarvisd killed with its slots (or a run killed while claiming one) left. The
    containers go with the orphan sweep (their labels)."""
    base = base or pool_base()
    if not base.is_dir():
        return
    with contextlib.suppress(OSError):
        for point in mounts.mounts_under(base):
            mounts.detach(point)
    for pool in base.iterdir():
        slots = pool / "slots"
        if slots.is_dir():
            for slot in slots.iterdir():
                if slot.name.endswith(".json"):  # a slot's token
                    slot.unlink(missing_ok=True)
                else:
                    _remove_slot_dir(slot)


def _remove_slot_dir(slot: Path) -> None:
    """A slot's directory, never through a mount still there (a workspace bound in
    ``ws/``): its ``ws`` tree goes by ``rmdir`` only, which refuses a mount point and a
    directory with anything in it."""
    with contextlib.suppress(OSError):
        for point in mounts.mounts_under(slot):
            mounts.detach(point)
    ws = slot / "ws"
    if ws.is_dir() and not ws.is_symlink():
        for dirpath, _dirs, _files in sorted(os.walk(ws), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
    for sub in ("home", "sock", "covers"):
        shutil.rmtree(slot / sub, ignore_errors=True)
    for name in ("slot.json",):
        with contextlib.suppress(OSError):
            (slot / name).unlink()
    with contextlib.suppress(OSError):
        slot.rmdir()


class SlotMaker:
    """Starts one slot of ``agent`` (installed at ``where``) for jarvisd's keeper."""

    def __init__(
        self, config: Config, agent: AgentDefinition, where: Path, directory: Path
    ) -> None:
        self.config = config
        self.agent = agent
        self.where = where
        self.directory = directory
        self.roots = _rw_roots(config)
        self._executor: DockerExecutor | None = None

    def executor(self) -> DockerExecutor:
        from ..sandbox import DockerExecutor

        if self._executor is None:
            self._executor = DockerExecutor(self.config, flavor=self.config.sandbox.backend)
        return self._executor

    def __call__(self) -> str:
        """Create, start and hand the agent its start frame and ``initialize``; the
        container's id once the agent answered (any failure removes what it made)."""
        from ..sandbox._policy import SANDBOX_GID, SANDBOX_UID

        slots = self.directory / "slots"
        slots.mkdir(mode=0o700, exist_ok=True)
        slot = slots / uuid.uuid4().hex[:12]
        slot.mkdir(mode=0o711)
        created = ""
        api = self.executor().client().api
        try:
            home, sock, ws = slot / "home", slot / "sock", slot / "ws"
            home.mkdir(mode=0o700)
            (home / "tmp").mkdir(mode=0o700)
            (home / "warm").mkdir(mode=0o700)
            for path in (home, home / "tmp", home / "warm"):
                os.chown(path, SANDBOX_UID, SANDBOX_GID)
            sock.mkdir(mode=0o711)
            ws.mkdir(mode=0o711)
            roots = []
            for i, root in enumerate(self.roots):
                (ws / str(i)).mkdir(mode=0o755)
                roots.append((root, str(ws / str(i))))
            token = secrets.token_urlsafe(32)
            config = self._container_config(home, sock, roots)
            created = api.create_container_from_config(config, f"jarvis-agent-{slot.name}")["Id"]
            self._handshake(api, created, token)
            meta = {"slot": slot.name, "token": token, "roots": roots}
            staged = self.directory / f".{created}.json"
            fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump(meta, out)
            os.rename(staged, slots / f"{created}.json")
            return str(created)
        except BaseException:
            if created:
                with contextlib.suppress(Exception):
                    api.remove_container(created, force=True)
            _remove_slot_dir(slot)
            raise

    def forget(self, container_id: str) -> None:
        """Drop what the slot of ``container_id`` holds on the host (its container is
        gone): its mounts, its directories, its token."""
        meta = self.directory / "slots" / f"{container_id}.json"
        try:
            name = json.loads(meta.read_text())["slot"]
        except (OSError, ValueError, KeyError):
            return
        _remove_slot_dir(self.directory / "slots" / str(name))
        meta.unlink(missing_ok=True)

    def _container_config(
        self, home: Path, sock: Path, roots: Sequence[tuple[str, str]]
    ) -> dict[str, Any]:
        from ..executors import ExecRequest
        from ..sandbox._covers import covers, make_covers
        from ._sandbox import FORWARD_PORT, SANDBOX_TIMEOUT_S, _binds

        executor = self.executor()
        binds = _binds(self.agent, self.where, home, (), None, Path("/"))
        binds.append((str(sock), GATEWAY_DIR, True))
        binds.extend((source, root, False) for root, source in roots)
        policy = executor.policy
        targets = [t for _, t, _ in binds]
        cover_dir, cover_binds = make_covers(covers(targets, policy.uid, policy.gid, ["/tmp"]))
        if cover_dir is not None:  # kept with the slot, gone with it
            shutil.move(str(cover_dir), home.parent / "covers")
            cover_binds = [
                (str(home.parent / "covers" / Path(s).name), t, r) for s, t, r in cover_binds
            ]
        request = ExecRequest(
            argv=(
                "python3",
                "-S",
                "-B",
                "-c",
                "from runners.acp_forward import entry; entry()",
                f"{GATEWAY_DIR}/{SOCKET_NAME}",
                str(FORWARD_PORT),
            ),
            timeout=SANDBOX_TIMEOUT_S,
            system_binds=tuple(binds),
        )
        config = executor._configure(request, (), (), None, cover_binds)
        # The roots receive the workspace mounted at claim: slaves of the shared pool.
        for spec in config["HostConfig"]["Mounts"]:
            if any(spec["Target"] == root for root, _ in roots):
                spec["BindOptions"] = {"Propagation": "rslave"}
        # Its stdin outlives the keeper's attach: the claiming run attaches again.
        config["StdinOnce"] = False
        config["Labels"] = {**config["Labels"], "jarvis.agent.slot": self.agent.name}
        return config

    def _handshake(self, api: Any, container_id: str, token: str) -> None:
        from ._sandbox import AGENT_DIR, FORWARD_PORT, HOME_DIR, SANDBOX_PATH, start_frame

        assert self.agent.prepare is not None
        inside = GatewayAccess(f"http://127.0.0.1:{FORWARD_PORT}", token, SLOT_MODEL)
        # Launched as a run without network: a run with egress never claims a slot
        # (ExternalAgent._claim_slot), so no slot's agent lacks a web tool it could use.
        launch = self.agent.prepare(
            Setup(Path(AGENT_DIR), Path(HOME_DIR), inside, root=True, sandboxed=True, egress=False)
        )
        launch = dataclasses.replace(launch, env=dict(launch.env, PATH=SANDBOX_PATH))
        sock = api.attach_socket(
            container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        raw = getattr(sock, "_sock", sock)
        try:
            api.start(container_id)
            raw.sendall(start_frame(launch, Path(HOME_DIR)))
            raw.sendall(json.dumps(_INITIALIZE).encode() + b"\n")
            _await_reply(raw, 0, INITIALIZE_TIMEOUT_S)
            memory = self.executor().policy.memory_bytes
            if self.agent.name in WARM_UP_SESSION and memory >= WARM_UP_MEMORY:
                # Its session, in a directory of its own HOME, is never prompted; the
                # run's session is another (its updates name their session: the run's
                # client ignores others').
                warm = {"cwd": f"{HOME_DIR}/warm", "mcpServers": []}
                raw.sendall(json.dumps(_request(1, "session/new", warm)).encode() + b"\n")
                _await_reply(raw, 1, INITIALIZE_TIMEOUT_S)
        finally:
            with contextlib.suppress(OSError):
                sock.close()
            response = getattr(sock, "_response", None)
            if response is not None:
                with contextlib.suppress(OSError, ValueError):
                    response.close()


def _request(ident: int, method: str, params: Mapping[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}


def _await_reply(raw: Any, ident: int, timeout: float) -> None:
    """Read the container's multiplexed output until the JSON-RPC reply ``ident``."""
    deadline = time.monotonic() + timeout
    buffered = b""
    out = b""

    def read(n: int) -> bytes:
        nonlocal buffered
        while len(buffered) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxError(f"the pooled agent did not answer request {ident} in time")
            raw.settimeout(left)
            chunk = raw.recv(65536)
            if not chunk:
                raise SandboxError(f"the pooled agent ended before answering request {ident}")
            buffered += chunk
        data, buffered = buffered[:n], buffered[n:]
        return data

    while True:
        kind, size = struct.unpack(">BxxxL", read(8))
        data = read(size)
        if kind != 1:
            continue  # stderr
        out += data
        while b"\n" in out:
            line, out = out.split(b"\n", 1)
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if isinstance(message, dict) and message.get("id") == ident:
                    if "error" in message:
                        raise SandboxError(
                            f"the pooled agent refused request {ident}: {str(message)[:300]}"
                        )
                    raw.settimeout(None)
                    return


def claim_slot(config: Config, agent: AgentDefinition, where: Path) -> Slot | None:
    """An idle slot of ``agent``, now this process's alone, or None (none kept, none
    ready, or its directories not what jarvis made)."""
    from ..sandbox._handout import claim, kept

    directory = pool_dir(config, agent, where)
    if not kept(directory):
        return None
    container_id = claim(directory)
    if container_id is None:
        return None
    try:
        meta = json.loads((directory / "slots" / f"{container_id}.json").read_text())
        slot = Slot(
            container_id,
            directory / "slots" / str(meta["slot"]),
            str(meta["token"]),
            tuple((str(r), str(s)) for r, s in meta["roots"]),
        )
        mounts.check_own(slot.sock_dir)
        if os.listdir(slot.sock_dir):
            raise SandboxError(f"{slot.sock_dir} is not empty")
    except (OSError, ValueError, KeyError, TypeError, SandboxError) as exc:
        log.warning("agent pool: slot %s refused (%s)", container_id[:12], exc)
        _refused(config, directory, container_id)
        return None
    return slot


def _refused(config: Config, directory: Path, container_id: str) -> None:
    """A claimed slot not used: its container removed, what it left on the host too
    (by its own record, when that can be read)."""
    from ..sandbox._engine import connect

    with contextlib.suppress(Exception):
        client = connect(config, config.sandbox.backend, timeout=config.sandbox.engine_timeout)
        try:
            client.api.remove_container(container_id, force=True)
        finally:
            client.close()
    meta = directory / "slots" / f"{container_id}.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        name = str(json.loads(meta.read_text())["slot"])
        if name and "/" not in name and name not in (".", ".."):
            _remove_slot_dir(directory / "slots" / name)
    meta.unlink(missing_ok=True)


#: The container memory an agent needs to start (opencode peaks at 392 to 409 MiB to
#: its first request): under it the agent is killed at each start, and a keeper would
#: start one every few seconds for nothing.
MIN_MEMORY = {"opencode": 512 << 20}


def fits_memory(config: Config, agent: AgentDefinition) -> bool:
    """Whether ``sandbox.memory`` lets ``agent`` start (else none is kept)."""
    from ..sandbox._policy import SandboxPolicy

    need = MIN_MEMORY.get(agent.name, 0)
    return not need or SandboxPolicy.from_config(config).memory_bytes >= need


def fits_model(agent: AgentDefinition, model: str) -> bool:
    """Whether the run's model name (the one its gateway hands agents) launches
    ``agent`` as :data:`SLOT_MODEL` did: opencode picks its system prompt by the
    name (a ``gpt-4o`` is given another than a local model), so such a run takes the
    usual start. codex's slot is taken whatever the name."""
    if agent.name == "opencode":
        from ._registry import opencode_prompt

        return opencode_prompt(model) == opencode_prompt(SLOT_MODEL)
    return True


def fits_slot(config: Config, workspace: Path) -> bool:
    """Whether a run in ``workspace`` can use a slot: it lies under a ``:rw`` root (and
    its ``.git``, if any, can be mounted read-only at claim: the kernel's new mount
    calls, Linux 5.12 on)."""
    real = Path(os.path.realpath(workspace))
    if os.path.lexists(real / ".git") and not mounts.new_mount_api():
        return False
    return any(real == Path(r) or real.is_relative_to(r) for r in _rw_roots(config))


def slot_fits(config: Config, slot: Slot, workspace: Path) -> tuple[str, Path] | None:
    """Where under ``slot``'s ``ws`` the workspace is mounted: its ``:rw`` root's
    directory and the path below it; None when the workspace is under no root of the
    slot's."""
    real = Path(os.path.realpath(workspace))
    for root, source in slot.roots:
        if real == Path(root) or real.is_relative_to(root):
            return source, real.relative_to(root)
    return None


@contextlib.contextmanager
def workspace_in(slot: Slot, executor: DockerExecutor, workspace: Path) -> Any:
    """The run's workspace mounted into ``slot``'s container at its own path while the
    block runs: the allowlist's check (``:rw``), then a bind of exactly what was checked
    (``pin``) onto a directory of the slot's, which propagates into the container."""
    from ..sandbox._mounts import pin
    from ._sandbox import _git_read_only

    mount = executor.mounts.check(f"{workspace}:rw")
    fits = slot_fits(executor.config, slot, mount.source)
    if fits is None:
        raise MountRefused(f"{workspace} is under no :rw root the agent's slot has")
    source, below = fits
    base = Path(source)
    mounts.check_own(base)
    target = base
    for part in below.parts:  # root's directories, no link: made here, now
        target = target / part
        try:
            os.mkdir(target, 0o755)
        except FileExistsError:
            pass
        mounts.check_own(target)
    # Its own .git read-only over it, as on the usual start (a hook or config the agent
    # wrote there would run on the host): checked like any mount, before anything.
    git = _git_read_only(mount.source)
    git_mount = executor.mounts.check(git[0]) if git else None
    fd = pin(mount)
    try:
        mounts.bind(f"/proc/self/fd/{fd}", target)
    finally:
        os.close(fd)
    try:
        info = os.lstat(target)
        if (info.st_dev, info.st_ino) != mount.identity:
            raise MountRefused(f"{workspace}: the mount is not what was checked")
        if git_mount is not None:
            mounts.read_only_over(git_mount, target / ".git")
        yield mount
    finally:
        if git_mount is not None:
            mounts.detach(target / ".git")
        mounts.detach(target)


def attach_slot(executor: DockerExecutor, slot: Slot, loop: Any) -> Any:
    """A channel on ``slot``'s running container (its agent waiting for the run's
    conversation), like a container the run started; SandboxError when it has ended."""
    from ..sandbox._channel import DockerChannel
    from ..sandbox._docker import attach_streams
    from ._sandbox import SANDBOX_TIMEOUT_S

    api = executor.client().api
    sock = stdin_sock = None
    try:
        # Attached first, then looked at: an attach to an ended container waits for ever.
        sock, stdin_sock = attach_streams(api, slot.id)
        if not (api.inspect_container(slot.id).get("State") or {}).get("Running"):
            raise SandboxError("the pooled agent's container had ended")
    except Exception as exc:
        for stream in (sock, stdin_sock):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        with contextlib.suppress(Exception):
            api.remove_container(slot.id, force=True)
        if isinstance(exc, SandboxError):
            raise
        raise SandboxError(f"cannot attach to the pooled agent: {exc}") from exc
    return DockerChannel(
        loop, api, slot.id, sock, SANDBOX_TIMEOUT_S, None, executor.policy, executor.engine,
        stdin_sock,
    )  # fmt: skip


def fits_socket(directory: Path) -> bool:
    """Whether a slot's gateway socket under the pool ``directory`` has a path short
    enough for a Unix socket (a long runtime directory: no pool)."""
    longest = directory / "slots" / ("0" * 12) / "sock" / SOCKET_NAME
    return len(os.fsencode(longest)) <= MAX_SOCKET_PATH


def release(slot: Slot, config: Config) -> None:
    """``slot``'s container removed (its run ended, or never began) and what it left on
    the host: the workspace's mount, its directories, its token."""
    from ..sandbox._engine import connect

    with contextlib.suppress(Exception):
        client = connect(config, config.sandbox.backend, timeout=config.sandbox.engine_timeout)
        try:
            client.api.remove_container(slot.id, force=True)
        finally:
            client.close()
    _remove_slot_dir(slot.dir)
    with contextlib.suppress(OSError):
        (slot.dir.parent / f"{slot.id}.json").unlink()
