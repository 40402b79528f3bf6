"""Starting an external agent in the sandbox (the default).

The container gets the sandbox's one policy (no network, read-only root, no
capabilities, a non-root user, limits) and, on top of it, what the agent needs, all
chosen here and never from the edge:

* the agent's npm tree from the cache, read-only, at /opt/agent;
* Node.js from the host, read-only, at /usr/local/bin/node (the image carries the C++
  runtime it links against);
* its per-run home (config files, the gateway's socket), read-write, at /home/agent;
* the workspace, read-write at its own path, through the mount allowlist like every
  mount (``sandbox.allowed_roots`` must allow it with ``:rw``);
* the workspace's own ``.git``, when it has one, read-only over it: a command the
  agent wrote into ``.git/config`` or ``.git/hooks`` would run on the host at the
  user's next ``git status`` or commit.

Agents speak only TCP: ``runners.acp_forward`` listens on the container's own
127.0.0.1 and relays to the gateway's socket, then starts the agent with the ACP
conversation on its stdio. What it starts (argv, environment, config files, working
directory) is its start frame, the first line written to the container's stdin
(:func:`start_frame`), not the container's settings: the gateway's token and the
agent's config are never in ``docker inspect``, nor written before the container runs,
and the container's command is the same for every run of every agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import stat
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .._config import Config
from .._errors import AgentNotInstalled, MountRefused, SandboxError, SandboxUnavailable
from ..executors import Channel, ExecRequest
from ._registry import AgentDefinition, GatewayAccess, Launch
from ._workspace import Workspace

if TYPE_CHECKING:
    from .._runcontext import RunContext
    from ..engines import Engine
    from ..sandbox import DockerExecutor
    from ..tools import ToolDispatcher

__all__ = [
    "AGENT_DIR",
    "FORWARD_PORT",
    "HOME_DIR",
    "NODE_PATH",
    "SANDBOX_PATH",
    "sandbox_gateway",
    "start_frame",
    "start_in_sandbox",
    "write_home",
]

AGENT_DIR = "/opt/agent"
HOME_DIR = "/home/agent"
NODE_PATH = "/usr/local/bin/node"
#: The port the forwarder listens on, on the container's own loopback.
FORWARD_PORT = 8787
#: The container's own timeout: the run's budgets (wall clock, cancel) end a run.
SANDBOX_TIMEOUT_S = 24 * 3600.0
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"

Prepare = Callable[[AgentDefinition, Path, Path, GatewayAccess], Launch]


async def start_in_sandbox(
    agent: AgentDefinition,
    where: Path,
    home: Path,
    access: GatewayAccess,
    workspace: Workspace,
    config: Config,
    prepare: Prepare,
    extra_binds: Sequence[tuple[str, str]] = (),
    *,
    mounts: Sequence[str] = (),
    copy: Path | None = None,
    egress: str = "",
    toolchain: tuple[Sequence[tuple[str, str, bool]], Mapping[str, str]] = ((), {}),
) -> Channel:
    """Start ``agent`` (installed at ``where``) in a container; ``home`` is its host
    home, holding the gateway's socket ``access.url`` names (``unix:PATH``).
    ``extra_binds`` are more read-only (host path, container path) binds the agent's
    program needs (chosen by jarvis, never from the edge). ``mounts``: the run's
    ``--mount`` requests, through the mount allowlist like the workspace. ``copy``:
    a copy of the workspace the sandbox user owns (``_mirror``), mounted at the
    workspace's path once the workspace itself passed the allowlist. ``egress``: the
    run's egress proxy socket (``RunContext.egress``), or "" for no network.
    ``toolchain``: a ``jarvis code`` run's environment, its binds and variables
    (``RunContext.sandbox_binds``, ``sandbox_env``: ``jarvisd.code._setup``)."""
    executor = await _executor(agent, workspace, config, copied=copy is not None)
    socket_path = Path(access.url.removeprefix("unix:"))
    inside = GatewayAccess(f"http://127.0.0.1:{FORWARD_PORT}", access.token, access.model)
    launch = prepare(agent, Path(AGENT_DIR), Path(HOME_DIR), inside)
    # The home only: its config files travel in the start frame.
    write_home(home, dataclasses.replace(launch, files={}), for_sandbox=True)
    binds = _binds(agent, where, home, extra_binds, copy, workspace.root)
    binds.extend(toolchain[0])
    socket_inside = f"{HOME_DIR}/{socket_path.relative_to(home)}"
    argv = (
        "python3",
        "-S",
        "-B",
        "-c",
        "from runners.acp_forward import entry; entry()",
        socket_inside,
        str(FORWARD_PORT),
    )
    env = dict(launch.env) | {"PATH": SANDBOX_PATH} | dict(toolchain[1])
    request = ExecRequest(
        argv=argv,
        timeout=SANDBOX_TIMEOUT_S,
        mounts=(
            *([] if copy is not None else [f"{workspace.root}:rw"]),
            *_git_read_only(workspace.root),
            *_besides(mounts, workspace.root),
        ),
        system_binds=tuple(binds),
        proxy_socket=egress,
    )
    channel = await executor.open(request)
    try:
        await channel.write(start_frame(dataclasses.replace(launch, env=env), workspace.root))
        if access.peers is not None:
            try:
                access.peers.bind(await asyncio.to_thread(_container_pid, channel))
            except Exception as exc:
                raise SandboxError(
                    f"cannot bind the gateway to the agent's container: {exc}"
                ) from exc
    except BaseException:
        await channel.kill("closed")
        raise
    return channel


def start_frame(launch: Launch, cwd: Path) -> bytes:
    """The line ``runners.acp_forward`` reads first: what to start, with what
    environment and HOME files, where."""
    frame = {
        "argv": list(launch.argv),
        "env": dict(launch.env),
        "files": dict(launch.files),
        "cwd": str(cwd),
    }
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


async def _executor(
    agent: AgentDefinition, workspace: Workspace, config: Config, *, copied: bool
) -> DockerExecutor:
    """The container backend, once the workspace is known to be one the sandbox user
    can enter (``copied``: a copy is mounted instead, once the workspace itself passed
    the allowlist)."""
    from ..sandbox import DockerExecutor
    from ..sandbox._covers import unreachable

    backend = config.sandbox.backend
    if backend not in ("docker", "podman"):
        raise SandboxUnavailable(
            f'external agents run in a container: sandbox.backend must be "docker" or '
            f'"podman" (it is {backend!r}), or run them with --no-sandbox'
        )
    executor = DockerExecutor(config, flavor=backend)
    private = unreachable(workspace.root, executor.policy.uid, executor.policy.gid)
    if copied:
        # The workspace is what the allowlist checks; its copy is what is mounted.
        await asyncio.to_thread(executor.mounts.check, f"{workspace.root}:rw")
        private = ""
    if private:
        # Refused before anything starts: in the container the agent would fail to
        # enter it, with nothing saying why.
        raise MountRefused(
            f"the agent's workspace {private}: give it access (chmod o+rx "
            f"{workspace.root}), let `jarvis code --agent {agent.name}` work on a copy of "
            "it, or run with --no-sandbox (not isolated)"
        )
    return executor


def _binds(
    agent: AgentDefinition,
    where: Path,
    home: Path,
    extra_binds: Sequence[tuple[str, str]],
    copy: Path | None,
    root: Path,
) -> list[tuple[str, str, bool]]:
    """The (host path, container path, read-only) binds jarvis chooses: the home,
    the agent's tree, Node.js, the program's own, the workspace's copy."""
    binds: list[tuple[str, str, bool]] = [(str(home), HOME_DIR, False)]
    if agent.builtin:
        binds.append((str(where), AGENT_DIR, True))
    if agent.needs_node:
        binds.append((_node_binary(agent), NODE_PATH, True))
    binds.extend((source, target, True) for source, target in extra_binds)
    if copy is not None:
        binds.append((str(copy), str(root), False))
    return binds


def _container_pid(channel: Channel) -> int:
    """The host pid of the container's init (its pid namespace is the run's)."""
    api, ident = getattr(channel, "api", None), getattr(channel, "id", None)
    if api is None or ident is None:
        raise SandboxError("the container engine gave no container to bind to")
    pid = int(api.inspect_container(ident)["State"]["Pid"])
    if pid <= 0:
        raise SandboxError("the agent's container is not running")
    return pid


def _besides(mounts: Sequence[str], root: Path) -> list[str]:
    """``mounts`` but the workspace (mounted read-write anyway: `jarvis code` names it)."""
    from ..sandbox._mounts import parse_mount_request

    return [m for m in mounts if os.path.abspath(parse_mount_request(m)[0]) != str(root)]


@contextlib.asynccontextmanager
async def sandbox_gateway(
    engine: Engine,
    run: RunContext,
    model: str,
    home: Path,
    *,
    max_tokens: int,
    name: str = "gateway.sock",
    default_model: str = "local",
    tools: ToolDispatcher | None = None,
    temperature: float | None = None,
    max_turns: int | None = None,
    token: str | None = None,
) -> AsyncIterator[GatewayAccess]:
    """The run's inference gateway on a Unix socket ``home/name`` (the home the agent's
    container mounts), handed to the sandbox user when jarvis runs as root; gone with
    the block. ``tools``: the run's tools, served at its ``/mcp``.

    As root, the socket belongs to the sandbox uid, which a host account may share:
    the gateway then serves only peers in the run's container (``access.peers``,
    bound by :func:`start_in_sandbox`), whatever token they hold. ``token``: a pooled
    agent's, minted with its slot (``_agentpool``), else the gateway mints one."""
    from ..gateway import Gateway, PeerBinding

    socket_path = home / name
    peers = PeerBinding() if os.geteuid() == 0 else None
    async with Gateway(
        engine,
        run,
        model,
        socket_path,
        max_tokens=max_tokens,
        tools=tools,
        temperature=temperature,
        max_turns=max_turns,
        peers=peers,
        token=token,
    ) as gateway:
        if os.geteuid() == 0:  # the socket is 0600
            from ..sandbox._policy import SANDBOX_GID, SANDBOX_UID

            os.chown(socket_path, SANDBOX_UID, SANDBOX_GID, follow_symlinks=False)
        yield GatewayAccess(
            f"unix:{socket_path}",
            gateway.token,
            gateway.model_name or model or default_model,
            peers,
        )


def _git_read_only(root: Path) -> tuple[str, ...]:
    """The mount request for ``root/.git`` read-only, when it is a directory or a
    gitdir file of its own (a symlink would be mounted at its target's path, not
    over ``.git``: the agent's fs requests are refused there all the same)."""
    git = Path(os.path.realpath(root)) / ".git"
    try:
        mode = os.lstat(git).st_mode
    except OSError:
        return ()
    return (str(git),) if stat.S_ISDIR(mode) or stat.S_ISREG(mode) else ()


def _node_binary(agent: AgentDefinition) -> str:
    """The host's Node.js executable itself (a symlink would dangle inside)."""
    node = shutil.which("node")
    if node is None:
        raise AgentNotInstalled(f"agent {agent.name!r} needs Node.js on PATH: install it")
    return os.path.realpath(node)


def write_home(home: Path, launch: Launch, *, for_sandbox: bool) -> None:
    """The agent's config files under its home; ``for_sandbox`` as root: owned by the
    sandbox user, who runs it there."""
    (home / "tmp").mkdir(exist_ok=True)
    for name, text in launch.files.items():
        target = home / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    if for_sandbox and os.geteuid() == 0:
        from ..sandbox._policy import SANDBOX_GID, SANDBOX_UID

        for dirpath, dirnames, filenames in os.walk(home):
            for name in [*dirnames, *filenames]:
                os.lchown(os.path.join(dirpath, name), SANDBOX_UID, SANDBOX_GID)
        os.lchown(home, SANDBOX_UID, SANDBOX_GID)
