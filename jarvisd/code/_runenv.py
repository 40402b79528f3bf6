"""What a code run's sandbox starts from: the workspace reachable under bwrap, the
image checked, the toolchain set up (``_setup``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import JarvisError, UsageError
from .._events import EventType
from .._runcontext import RunContext
from ..runs._outcome import Failure
from ._store import Workspace

if TYPE_CHECKING:
    from .._config import Config
    from ..executors import CodeExecutor
    from ..netpolicy import NetEvent
    from ._image import ImageChoice

__all__ = ["_check_image", "_reachable_under_bwrap", "_setup"]


def _reachable_under_bwrap(path: str, config: Config) -> None:
    """As root, bwrap runs as the sandbox's user, who must reach ``path`` (a workspace,
    the environment cache) to mount it: refused clearly when a directory above it
    (root's 0700 home, with jarvis's default directories) keeps that user out."""
    import os
    import stat

    if os.geteuid() != 0:
        return  # bwrap maps the user's own id: what the user reaches, it mounts
    from ..sandbox._policy import SandboxPolicy

    policy = SandboxPolicy.from_config(config)
    current = Path(path)
    for folder in (current, *current.parents):
        info = os.stat(folder)
        if info.st_uid == policy.uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid == policy.gid:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            raise UsageError(
                f"sandbox.backend is bwrap and jarvis runs as root: the sandbox's user "
                f"({policy.uid}) cannot reach {path} ({folder} is closed to it), so bwrap "
                "cannot mount it. Run jarvis code as your own user, or use sandbox.backend "
                '= "docker"'
            )


async def _check_image(
    run: RunContext, executor: CodeExecutor, choice: ImageChoice, record: dict[str, Any]
) -> None:
    """Say which image the run uses and why; the project's own is checked first (in
    the engine, never pulled; it runs jarvis's runner). ``record`` gets the failure."""
    from ._image import check_image

    for note in choice.notes:
        run.bus.publish(EventType.CODE_SETUP, line=note)
    if not choice.own:
        return
    run.bus.publish(EventType.CODE_SETUP, line=f"image {choice.image} (from {choice.origin})")
    try:
        record["python"] = await check_image(executor, choice.image)
    except JarvisError as exc:
        record["failure"] = Failure.of(exc).to_dict()
        raise


async def _setup(
    ws: Workspace, run: RunContext, config: Config, executor: CodeExecutor, record: dict[str, Any]
) -> CodeExecutor:
    """The run's toolchain (``jarvisd.code._setup``), when it has a setup: the executor
    the test command then runs on (and, on the run's context, what the agent's sandbox
    gets); ``record`` gets what the outcome says of it, its failure too before
    SetupFailed is raised."""
    from .._errors import SetupFailed
    from ._setup import plan_setup, prepare_toolchain, run_env, with_toolchain

    plan = plan_setup(ws.path, ws.setup or config.code.setup, enabled=not ws.no_setup)
    if plan is None or run.cancel.cancelled:
        return executor

    def say(line: str) -> None:
        run.bus.publish(EventType.CODE_SETUP, line=line)

    def connected(event: NetEvent) -> None:  # what the setup reached, as the agent's are shown
        run.bus.publish(EventType.NET_CONNECT, phase="setup", **event.to_dict())

    record["files"] = list(plan.files)
    record["command"] = plan.command or plan.pip_line
    if config.sandbox.backend == "bwrap":
        from ._setup import envs_dir

        envs = envs_dir()
        try:
            envs.mkdir(parents=True, exist_ok=True, mode=0o700)
            _reachable_under_bwrap(str(envs.parent), config)
        except (UsageError, OSError) as exc:
            failure = SetupFailed(f"the setup cannot run under bwrap: {exc}")
            record["failure"] = Failure.of(failure).to_dict()
            raise failure from exc
    try:
        toolchain = await prepare_toolchain(
            plan, ws.path, config, executor, say, project=ws.source, on_connect=connected
        )
    except SetupFailed as exc:
        record["failure"] = Failure.of(exc).to_dict()
        raise
    record.update(toolchain.to_dict())
    # Candidates share one run context and each sets up (the same environment): a
    # target is bound once, or the engine refuses the sandbox (a duplicate mount point).
    binds = toolchain.binds()
    targets = {target for _, target, _ in binds}
    kept = tuple(b for b in run.sandbox_binds if b[1] not in targets)
    run.sandbox_binds = (*kept, *binds)
    agent_env = {k: v for k, v in run_env(ws.path).items() if k in ("PATH", "VIRTUAL_ENV")}
    run.sandbox_env = {**run.sandbox_env, **agent_env}
    return with_toolchain(executor, toolchain, ws.path)
