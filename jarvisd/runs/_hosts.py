"""The Host seam: where a run happens. One required method, ``run(spec, run)``.

The CLI picks a host as httpx picks a transport: ``jarvisd.daemon.DaemonHost`` when
jarvisd answers, else :class:`LocalHost`. Both return the same :class:`RunOutcome` for the same
spec; the caller's :class:`RunContext` receives the streamed answer (``on_delta``) and
the tool-call events on its bus either way. Tests use ``jarvisd.testing.FakeHost``.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from .._runcontext import RunContext
from ._outcome import Failure, RunOutcome
from ._spec import AgentSpec

if TYPE_CHECKING:
    from .._config import Config
    from ..engines import Engine

__all__ = ["INTERRUPTED", "Host", "LocalHost"]

INTERRUPTED = "interrupted by the user"


class Host(abc.ABC):
    """Runs a spec somewhere and reports how it ended."""

    @abc.abstractmethod
    def run(self, spec: AgentSpec, run: RunContext) -> RunOutcome:
        """Run ``spec`` to its outcome (blocking). Streamed text goes to
        ``run.on_delta``, tool-call events to ``run.bus``; Ctrl-C stops the run and
        returns a ``cancelled`` outcome."""


class LocalHost(Host):
    """Runs in this process. ``config`` defaults to the config file, read per run."""

    def __init__(self, config: Config | None = None, engine: Engine | None = None) -> None:
        self.config = config
        self.engine = engine

    def run(self, spec: AgentSpec, run: RunContext) -> RunOutcome:
        # asyncio here, not above: DaemonHost derives from Host, and `jarvis ask` hands
        # its question to jarvisd without it (tests/test_import_graph.py).
        import asyncio

        from .._config import load_config

        config = self.config or load_config()
        return asyncio.run(self._run(spec, run, config))

    async def _run(self, spec: AgentSpec, run: RunContext, config: Config) -> RunOutcome:
        import asyncio
        import signal
        import threading

        from ._execute import run_spec

        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def interrupt() -> None:
            # The first Ctrl-C stops the run at its next safe point (tool calls get
            # their results, containers go); a second one stops it at once.
            if run.cancel.cancelled and task is not None:
                task.cancel()
            run.cancel.cancel(INTERRUPTED)

        handled = threading.current_thread() is threading.main_thread()
        if handled:
            loop.add_signal_handler(signal.SIGINT, interrupt)
        try:
            return await run_spec(spec, run, config, self.engine)
        except asyncio.CancelledError:
            return RunOutcome(agent=spec.agent, failure=Failure("cancelled", INTERRUPTED))
        finally:
            if handled:
                loop.remove_signal_handler(signal.SIGINT)
