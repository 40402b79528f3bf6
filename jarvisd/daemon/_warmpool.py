"""jarvisd keeps the warm pools for its workers:

* the sandbox warm pool (``sandbox.warm_pool``): started containers of the code agents'
  REPL session, which a worker's run claims (``jarvisd.sandbox._handout``);
* the pool of started external agents (``agents.warm`` per agent that opts in:
  ``jarvisd.external._agentpool``), which `jarvis ask --agent` runs claim the same way.

Only for a container backend; a pool that cannot start containers only logs, and runs
start their own."""

from __future__ import annotations

import logging
from typing import Any

from .._config import Config

__all__ = ["start_keeper"]

log = logging.getLogger(__name__)


class Keepers:
    """The pools' keepers, stopped together (each removes its idle containers)."""

    def __init__(self, keepers: list[Any], agents: bool = False) -> None:
        self.keepers = keepers
        #: Whether the agent pool's shared mount is there, to go after its keepers.
        self.agents = agents

    def stop(self) -> None:
        for keeper in self.keepers:
            keeper.stop()
        if self.agents:
            from ..external._agentpool import unshare_base

            try:
                unshare_base()
            except Exception as exc:
                log.warning("agent pool: its mounts were not all removed (%s)", exc)


def start_keeper(config: Config) -> Keepers | None:
    """The running keepers (their ``stop()`` removes the idle containers), or None."""
    if config.sandbox.backend not in ("docker", "podman"):
        return None
    agents = _agent_keepers(config)
    keepers = [k for k in (_sandbox_keeper(config), *agents) if k is not None]
    return Keepers(keepers, agents=bool(agents)) if keepers else None


def _sandbox_keeper(config: Config) -> Any:
    size = config.sandbox.warm_pool
    if not size:
        return None
    from ..agents._repl import ReplSession
    from ..sandbox import DockerExecutor
    from ..sandbox._docker import poolable
    from ..sandbox._handout import PoolKeeper, handout_dir

    try:
        executor = DockerExecutor(config, flavor=config.sandbox.backend)
        # The request a code agent's session makes: its run-specific input comes in
        # the start frame, so the container holds nothing of any run.
        request = ReplSession(executor, exec_timeout=1, session_timeout=1)._request()
        if not poolable(request):
            return None
        container = executor._configure(request, (), (), None)
        keeper = PoolKeeper(
            executor.client().api, container, handout_dir(executor.address, container), size
        )
        keeper.start()
    except Exception as exc:  # no engine must never stop the daemon
        log.warning("warm pool: not kept (%s)", exc)
        return None
    log.info("warm pool: keeping %d started sandbox container(s)", size)
    return keeper


def _agent_keepers(config: Config) -> list[Any]:
    """A keeper per installed agent that opts in, when jarvisd can mount workspaces into
    started containers (root, the engine in its mount namespace, a ``:rw`` root)."""
    import os

    size = config.agents.warm
    if not size or os.geteuid() != 0:
        return []
    from ..external._agentpool import (
        POOLED,
        SlotMaker,
        fits_memory,
        fits_socket,
        pool_base,
        pool_dir,
        share_base,
        sweep_slots,
    )
    from ..external._install import install_dir, installed
    from ..external._registry import BUILTIN
    from ..sandbox._engine import engine_address
    from ..sandbox._handout import PoolKeeper
    from ..sandbox._staging import can_stage

    agents = [
        BUILTIN[name]
        for name in sorted(POOLED & set(config.agents.warm_agents))
        if installed(BUILTIN[name]) and fits_memory(config, BUILTIN[name])
    ]
    if not agents:
        return []
    try:
        if not can_stage(engine_address(config, config.sandbox.backend)):
            log.info("agent pool: not kept (the engine is not in jarvisd's mount namespace)")
            return []
        sweep_slots()  # what a killed jarvisd left: its containers went with the sweep
        share_base(pool_base())
    except Exception as exc:
        log.warning("agent pool: not kept (%s)", exc)
        return []
    keepers = []
    for agent in agents:
        where = install_dir(agent)
        maker = SlotMaker(config, agent, where, pool_dir(config, agent, where))
        if not maker.roots:
            log.info("agent pool: not kept (sandbox.allowed_roots has no :rw root)")
            break
        if not fits_socket(maker.directory):
            log.info("agent pool: not kept (%s is too long a path for a socket)", maker.directory)
            break
        try:
            keeper = PoolKeeper(
                maker.executor().client().api, {}, maker.directory, size,
                make=maker, forget=maker.forget,
            )  # fmt: skip
            keeper.start()
        except Exception as exc:
            log.warning("agent pool: %s not kept (%s)", agent.name, exc)
            continue
        log.info("agent pool: keeping %d started %s agent(s)", size, agent.name)
        keepers.append(keeper)
    if not keepers:
        from ..external._agentpool import unshare_base

        unshare_base()
    return keepers
