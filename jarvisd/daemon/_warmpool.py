"""jarvisd keeps the sandbox warm pool (``sandbox.warm_pool``) for its workers: started
containers of the code agents' REPL session, which a worker's run claims
(``jarvisd.sandbox._handout``). Only for a container backend; a pool that cannot start
containers only logs, and runs start their own."""

from __future__ import annotations

import logging
from typing import Any

from .._config import Config

__all__ = ["start_keeper"]

log = logging.getLogger(__name__)


def start_keeper(config: Config) -> Any:
    """The running keeper (its ``stop()`` removes the idle containers), or None."""
    size = config.sandbox.warm_pool
    if not size or config.sandbox.backend not in ("docker", "podman"):
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
