"""SandboxedAgent: any registered agent, run inside the sandbox.

The container runs ``runners.sandbox_runner`` (jarvis's own code, mounted read-only).
It has no network: every generation it needs comes back to the host as an ``infer``
frame, and the host answers with its real engine through ``RunEngine``, so the run's
budget, cancel token and inference events stay on the host. Concurrent ``infer`` frames
are served concurrently. Cancelling the run removes the container.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import TYPE_CHECKING, Any, ClassVar

from .. import _errors
from .._errors import JarvisError, ProtocolError, SandboxError, UsageError
from .._events import EventType
from .._run import BudgetExceeded, Cancelled, RunContext, RunStopped
from ..agents import AgentContext, AgentRegistry, AgentResult, BaseAgent
from ..engines import Engine, RunEngine
from ..executors import Channel, CodeExecutor, ExecRequest, ExecResult, receive_frame, send_frame
from ..protocol import (
    ErrorFrame,
    EventFrame,
    FrameError,
    Infer,
    InferResult,
    Log,
    Ping,
    Pong,
    ResultFrame,
    Start,
)

if TYPE_CHECKING:
    from .._config import Config
    from ..runtime import AgentSpec

__all__ = ["RUNNER_ARGV", "SandboxedAgent", "sandboxed_agent"]

log = logging.getLogger(__name__)

# -S: no site module; -c rather than -m: no runpy. Both are start-up time in every run.
RUNNER_ARGV = ("python3", "-S", "-B", "-c", "from runners.sandbox_runner import entry; entry()")


class SandboxedAgent(BaseAgent):
    """Runs agent ``spec.agent`` in a container; inference is proxied to ``engine``."""

    agent_id: ClassVar[str] = "sandboxed"
    accepts_tools: ClassVar[bool] = False

    def __init__(
        self,
        engine: Engine,
        model: str = "",
        *,
        spec: AgentSpec,
        config: Config,
        executor: CodeExecutor | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(engine, model, **kwargs)
        self.spec = spec
        self.config = config
        self.executor = executor
        self.timeout = config.sandbox.timeout if timeout is None else timeout

    def _executor(self) -> CodeExecutor:
        if self.executor is None:
            from . import executor_for_backend

            backend = self.config.sandbox.backend
            if backend == "none":
                raise UsageError(
                    'running an agent sandboxed needs sandbox.backend = "docker", "podman" or '
                    '"bwrap" (it is "none")'
                )
            self.executor = executor_for_backend(backend, self.config)
        return self.executor

    def _payload(self, input: str, context: AgentContext | None, run: RunContext) -> dict[str, Any]:
        inner = dataclasses.replace(self.spec, input=input, sandbox=False, context_file=None)
        payload: dict[str, Any] = {
            "spec": inner.to_dict(),
            "config": self.config.to_dict(),
            "context": None,
            "depth": run.depth,
            "run_id": run.run_id,
        }
        if context is not None:
            payload["context"] = {
                "conversation": [m.to_dict() for m in context.conversation],
                "metadata": _jsonable(context.metadata),
            }
        return payload

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> AgentResult:
        run = self._run_context(run)
        run.cancel.raise_if_cancelled()
        request = ExecRequest(argv=RUNNER_ARGV, timeout=self.timeout, mounts=self.spec.mounts)
        channel = await self._executor().open(request)
        session = _Session(self, channel, run)
        return await session.run(self._payload(input, context, run))


class _Session:
    """One sandboxed run: the frame loop between the container and the host engine."""

    def __init__(self, agent: SandboxedAgent, channel: Channel, run: RunContext) -> None:
        self.agent = agent
        self.channel = channel
        self.run_ctx = run
        self.engine = RunEngine.bind(agent.engine, run)
        self.stopped: RunStopped | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.noise: list[str] = []

    async def run(self, payload: dict[str, Any]) -> AgentResult:
        loop = asyncio.get_running_loop()

        def on_cancel() -> None:
            loop.call_soon_threadsafe(self._kill_soon, "cancelled")

        kill_on_cancel = self.run_ctx.cancel.on_cancel(on_cancel)
        final: ResultFrame | ErrorFrame | None = None
        try:
            await send_frame(self.channel, Start(task="agent", payload=payload))
            final = await self._loop()
        except FrameError as exc:
            raise ProtocolError(f"the sandboxed agent broke the frame protocol: {exc}") from exc
        except SandboxError:
            if not self.run_ctx.cancel.cancelled and self.stopped is None:
                raise
        finally:
            kill_on_cancel()
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            if final is None:
                await self.channel.kill("cancelled" if self.run_ctx.cancel.cancelled else "killed")
            else:
                await self.channel.close_stdin()
            outcome = await self.channel.wait()
        return self._outcome(final, outcome)

    def _kill_soon(self, reason: str) -> None:
        task = asyncio.ensure_future(self.channel.kill(reason))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _loop(self) -> ResultFrame | ErrorFrame | None:
        while True:
            frame = await receive_frame(self.channel, self.noise)
            if frame is None:
                return None
            if isinstance(frame, Infer):
                task = asyncio.ensure_future(self._serve(frame))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            elif isinstance(frame, EventFrame):
                self._publish(frame)
            elif isinstance(frame, ResultFrame | ErrorFrame):
                return frame
            elif isinstance(frame, Ping):
                await send_frame(self.channel, Pong(id=frame.id))
            elif isinstance(frame, Log):
                log.info("sandboxed agent: %s", frame.message)

    def _publish(self, frame: EventFrame) -> None:
        try:
            event_type = EventType(frame.type)
        except ValueError:
            log.debug("sandboxed agent sent unknown event type %r", frame.type)
            return
        data = dict(frame.data)
        data["sandboxed"] = True
        self.run_ctx.bus.publish(event_type, **{str(k): v for k, v in data.items()})

    async def _serve(self, frame: Infer) -> None:
        from runners.sandbox_runner import parse_infer_request

        try:
            messages, _model, tools, options = parse_infer_request(frame.request)
            # The host's choice of model stands: the sandbox cannot switch it. The
            # container only waits meanwhile, so its clock (sandbox.timeout) is held:
            # a slow local model must not get the agent killed. The run's own budget
            # and the task's time limit still bound the whole run.
            with self.channel.clock_held():
                generation = await self.engine.generate(
                    messages, model=self.agent.model, tools=tools, options=options
                )
            reply = InferResult(id=frame.id, generation=generation.to_dict())
        except RunStopped as exc:
            self.stopped = exc
            await self.channel.kill("cancelled")
            return
        except JarvisError as exc:
            reply = InferResult(id=frame.id, error=f"{type(exc).__name__}: {exc}")
        except ValueError as exc:
            reply = InferResult(id=frame.id, error=str(exc))
        with contextlib.suppress(SandboxError):
            await send_frame(self.channel, reply)

    def _outcome(self, final: ResultFrame | ErrorFrame | None, outcome: ExecResult) -> AgentResult:
        if self.stopped is not None:
            raise self.stopped
        if self.run_ctx.cancel.cancelled:
            raise Cancelled(self.run_ctx.cancel.reason)
        if isinstance(final, ResultFrame):
            result = AgentResult.from_dict(dict(final.result))
            result.metadata.setdefault("sandbox", {})
            result.metadata["sandbox"] = {
                "backend": getattr(self.agent.executor, "name", ""),
                "duration_s": round(outcome.duration_s, 3),
            }
            return result
        if isinstance(final, ErrorFrame):
            raise _error_from_frame(final)
        tail = "\n".join(outcome.stderr.strip().splitlines()[-5:])
        if outcome.reason == "timeout":
            raise SandboxError(
                f"the sandboxed agent ran for more than {self.agent.timeout:g}s of its own "
                "time (sandbox.timeout; waiting for inference does not count); its container "
                "was removed"
            )
        if outcome.reason == "oom":
            raise SandboxError(
                "the sandboxed agent ran out of memory (sandbox.memory) and was killed"
            )
        raise SandboxError(
            f"the sandboxed agent ended without a result (exit {outcome.exit_code})"
            + (f":\n{tail}" if tail else "")
        )


def _error_from_frame(frame: ErrorFrame) -> BaseException:
    if frame.code == "cancelled":
        return Cancelled(frame.message)
    if frame.code == "stopped":
        return BudgetExceeded(frame.message)
    cls = getattr(_errors, frame.code, None) if frame.code in _errors.__all__ else None
    if isinstance(cls, type) and issubclass(cls, JarvisError) and cls is not _errors.ConfigError:
        with contextlib.suppress(TypeError):
            return cls(f"in the sandbox: {frame.message}")
    return SandboxError(f"the sandboxed agent failed ({frame.code}): {frame.message}")


def _jsonable(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, default=str))


def sandboxed_agent(key: str, spec: AgentSpec, config: Config, engine: Engine) -> BaseAgent:
    """What ``jarvisd.runtime.build_agent`` returns for ``spec.sandbox``: agent ``key``
    in the sandbox. Mounts are checked when the run starts (MountRefused)."""
    AgentRegistry.get(key)  # an unknown agent fails here, on the host, clearly
    inner = dataclasses.replace(spec, agent=key)
    return SandboxedAgent(engine, spec.model, spec=inner, config=config)
