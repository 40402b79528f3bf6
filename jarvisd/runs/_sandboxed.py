"""SandboxedAgent: any registered agent, run inside the sandbox.

It sits with the wiring (``runs/``), not in ``sandbox/``: it is an agent, built by
``build_agent``, that runs a spec through a sandbox; the sandbox stays a leaf below
the agents. ``RUNNER_ARGV`` (the runner's command line) is the sandbox's.

The container runs ``runners.sandbox_runner`` (jarvis's own code, mounted read-only).
It has no network: every generation it needs comes back to the host as an ``infer``
frame, served by a :class:`~jarvisd.bridge.FrameSession` with the host's real engine,
so the run's budget, cancel token and inference events stay on the host. Concurrent
``infer`` frames are served concurrently (a few at a time). Cancelling the run removes
the container.

What the program may cost is bounded on the host, whatever the code inside does: each
request's ``max_tokens`` is clamped to the agent's, and what the run leaves unbounded
(engine calls and tokens, host tool calls) the program gets a cap for from the agent's
``max_turns`` (:func:`program_budget`). The start frame carries only the config the
runner needs (no engine addresses, no allowed roots).

MCP tools (``SERVER.tool``) run on the host's side, with servers started in the sandbox
too: through the same backend (a container, or bubblewrap, of their own: no network, no
host files but their checked ``mounts``), never as host processes, and stopped when the
run ends, however it ends. The start payload offers their specs; the runner's proxy
tools call them with ``tool`` frames (``jarvisd.bridge.HostTools`` serves them).

A sandboxed run resumes after a daemon crash. Its loop state lives in the container,
so the runner sends it to the host as ``checkpoint`` frames after each completed turn;
the host records it through ``run.checkpoint`` (as ``{"agent": "sandboxed", "program":
state}``) and a resumed run's start frame carries it back (``payload["resume"]``). The
runner waits for the host's ``pong`` after each checkpoint and after each
``tool_call_start`` before the call runs (``payload["checkpoints"]``), so the daemon
has a record of every cell and tool call before it can have an effect: one in flight
at a crash is "effect unverified", never run again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from .._errors import JarvisError, ProtocolError, SandboxError, UsageError
from .._runcontext import Budget, RunContext
from ..agents import AgentContext, AgentRegistry, AgentResult, BaseAgent
from ..bridge import FrameSession, Outcome
from ..engines import Engine
from ..executors import CodeExecutor, ExecRequest
from ..mcp import McpToolset, mcp_server_of
from ..protocol import ErrorFrame, OfferedTool, ResultFrame, Start, jsonable
from ..sandbox._runner import RUNNER_ARGV
from ._outcome import Failure, RunOutcome

if TYPE_CHECKING:
    from .._config import Config
    from ._spec import AgentSpec

__all__ = [
    "CALLS_PER_TURN",
    "SandboxedAgent",
    "default_budget",
    "program_budget",
    "runner_config",
    "sandboxed_agent",
]

#: The most of a sandboxed program's error message that reaches the host's outcome.
MAX_ERROR_CHARS = 4000
#: Built-in tools that read host state the container does not have: the host runs
#: them, as it runs MCP tools, and the agent in here calls them through its frames.
HOST_SIDE_TOOLS = frozenset({"retrieval"})

#: Engine calls a sandboxed program may make per turn of its agent when the run sets no
#: budget (a tool loop makes one or two; rlm's llm_batch makes one per chunk).
CALLS_PER_TURN = 16
#: Prompt tokens allowed per call on top of the completion, for the default token budget.
_PROMPT_TOKENS_PER_CALL = 8192


def default_budget(max_turns: int, max_tokens: int) -> Budget:
    """The program's own budget when the run has none: enough for ``max_turns`` turns of
    an agent that makes up to CALLS_PER_TURN engine calls, and as many host tool calls,
    a turn, and no more."""
    calls = CALLS_PER_TURN * max(max_turns, 1)
    return Budget(
        max_calls=calls,
        max_tokens=calls * (max_tokens + _PROMPT_TOKENS_PER_CALL),
        max_tool_calls=calls,
    )


def program_budget(run: Budget, max_turns: int, max_tokens: int) -> Budget | None:
    """The program's own ledger, capping what the run's leaves unbounded: engine calls
    and tokens when the run caps neither, host tool calls when it does not cap them
    (:func:`default_budget`'s caps). None when the run caps everything."""
    own = default_budget(max_turns, max_tokens)
    if run.max_calls is not None or run.max_tokens is not None:
        own.max_calls = own.max_tokens = None
    if run.max_tool_calls is not None:
        own.max_tool_calls = None
    if own.max_calls is None and own.max_tool_calls is None:
        return None
    return own


def runner_config(config: Config) -> dict[str, object]:
    """The part of ``config`` the in-container runner needs: agent defaults and tool
    settings. Engine addresses, the sandbox's allowed roots and engine socket, and the
    daemon's settings stay on the host."""
    full = config.to_dict()
    tools = dict(full["tools"], allow_network=False)  # there is no network in there
    return {"agent": full["agent"], "tools": tools}


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
        max_tokens: int = 1024,
    ) -> None:
        # Only max_tokens of BaseAgent's: it clamps each proxied request; the agent in
        # there has its own temperature and prompt, from the spec.
        super().__init__(engine, model, max_tokens=max_tokens)
        self.spec = spec
        self.config = config
        self.executor = executor
        self.timeout = config.sandbox.timeout if timeout is None else timeout

    def _executor(self) -> CodeExecutor:
        if self.executor is None:
            from ..sandbox import executor_for_backend

            backend = self.config.sandbox.backend
            if backend == "none":
                raise UsageError(
                    'running an agent sandboxed needs sandbox.backend = "docker", "podman" or '
                    '"bwrap" (it is "none")'
                )
            self.executor = executor_for_backend(backend, self.config)
        return self.executor

    def _mcp_names(self) -> list[str]:
        return [name for name in self.spec.tools if mcp_server_of(name, self.config)]

    def _host_side(self) -> list[str]:
        """The run's tools the host runs for it (like MCP tools): those that need what
        only the host has (the memory database is not in the container)."""
        return [name for name in self.spec.tools if name.strip() in HOST_SIDE_TOOLS]

    def _payload(
        self,
        input: str,
        context: AgentContext | None,
        run: RunContext,
        host_tools: Sequence[OfferedTool] = (),
        resume: Mapping[str, Any] | None = None,
    ) -> dict[str, object]:
        # The MCP tools go as host tools: inside, the config names no server.
        mcp_names = {*self._mcp_names(), *self._host_side()}
        tools = tuple(name for name in self.spec.tools if name not in mcp_names)
        inner = dataclasses.replace(
            # Inside, the mounts are made already: the inner run names none.
            self.spec,
            input=input,
            isolation="default",
            context_file=None,
            tools=tools,
            mounts=(),
            allow_net=(),  # the host's proxy serves the whole container
        )
        payload: dict[str, object] = {
            "spec": inner.to_dict(),
            "config": runner_config(self.config),
            "context": None,
            "depth": run.depth,
            "run_id": run.run_id,
            "host_tools": [tool.to_dict() for tool in host_tools],
            # The runner checkpoints (and waits for the host's record) only when the
            # run keeps checkpoints: a daemon task.
            "checkpoints": run.checkpoint is not None,
            "resume": None if resume is None else jsonable(resume),
        }
        if context is not None:
            payload["context"] = {
                "conversation": [m.to_dict() for m in context.conversation],
                "metadata": jsonable(context.metadata),
            }
        return payload

    async def arun(
        self, input: str, context: AgentContext | None = None, *, run: RunContext | None = None
    ) -> AgentResult:
        run = self._run_context(run)
        run.cancel.raise_if_cancelled()
        resume = _program_state(run.resume, self.agent_id)
        max_turns = self.spec.max_turns or self.config.agent.max_turns
        budget = program_budget(run.budget, max_turns, self.max_tokens)
        request = ExecRequest(
            argv=RUNNER_ARGV,
            timeout=self.timeout,
            mounts=self.spec.mounts,
            separate_code=True,
            proxy_socket=run.egress,
            system_binds=run.sandbox_binds,
            env=dict(run.sandbox_env),
        )
        executor = self._executor()
        # The run's MCP servers start through the same sandbox backend, and are stopped
        # (their containers removed) when the toolset closes, however the run ends.
        async with McpToolset(self.config, executor) as toolset:
            host_tools = await toolset.tools(self._mcp_names())
            if self._host_side():
                from ..tools import build_tools

                host_tools += build_tools(self._host_side(), self.config, self.engine)
            channel = await executor.open(request)
            session = FrameSession(
                channel,
                self.engine,
                run,
                model=self.model,
                max_tokens=self.max_tokens,
                budget=budget,
                event_tags={"sandboxed": True},
                name="sandboxed agent",
                tools=host_tools,
                on_checkpoint=_recorder(run, self.agent_id),
            )
            payload = self._payload(input, context, run, session.tools.offered(), resume)
            outcome = await session.run(Start(task="agent", payload=payload))
        return self._result(outcome, run)

    def _result(self, outcome: Outcome, run: RunContext) -> AgentResult:
        if outcome.stopped is not None:
            raise outcome.stopped
        if run.cancel.cancelled:
            raise run.cancel.error()
        final, process = outcome.final, outcome.process
        if isinstance(final, ResultFrame):
            try:
                inner = RunOutcome.from_dict(final.result)
            except ProtocolError as exc:
                raise SandboxError(f"the sandboxed agent sent a malformed result: {exc}") from exc
            result = _agent_result(inner)
            result.metadata["sandbox"] = {
                "backend": getattr(self.executor, "name", ""),
                "duration_s": round(process.duration_s, 3),
            }
            return result
        if isinstance(final, ErrorFrame):
            raise _in_the_sandbox(Failure(final.code, final.message))
        tail = "\n".join(process.stderr.strip().splitlines()[-5:])
        if process.reason == "timeout":
            raise SandboxError(
                f"the sandboxed agent ran for more than {self.timeout:g}s of its own "
                "time (sandbox.timeout; waiting for inference does not count); its container "
                "was removed"
            )
        if process.reason == "oom":
            raise SandboxError(
                "the sandboxed agent ran out of memory (sandbox.memory) and was killed"
            )
        raise SandboxError(
            f"the sandboxed agent ended without a result (exit {process.exit_code})"
            + (f":\n{tail}" if tail else "")
        )


def _program_state(resume: Mapping[str, Any] | None, agent_id: str) -> Mapping[str, Any] | None:
    """The program's own state in ``resume`` (what :func:`_recorder` recorded), or None
    to start afresh. A state that says it cannot be resumed is refused with its reason."""
    if resume is None:
        return None
    if resume.get("resumable") is False:  # recorded by an older version
        raise SandboxError(str(resume.get("reason") or "this sandboxed run cannot be resumed"))
    program = resume.get("program")
    if resume.get("agent") != agent_id or not isinstance(program, Mapping):
        return None
    return program


def _recorder(run: RunContext, agent_id: str) -> Callable[[Mapping[str, Any]], None] | None:
    """What records the program's ``checkpoint`` frames with the run (None: the run
    keeps none). The program's state is its own: kept whole, under a key of ours."""
    checkpoint = run.checkpoint
    if checkpoint is None:
        return None
    return lambda state: checkpoint({"agent": agent_id, "program": dict(state)})


def _agent_result(outcome: RunOutcome) -> AgentResult:
    """The inner run's outcome as this (host-side) agent's result. A run that ended
    without an answer stays one (the host's outcome reports it the same way as an
    unsandboxed run); any other failure is raised here."""
    metadata = dict(outcome.metadata)
    failure = outcome.failure
    content = outcome.answer
    if failure is not None:
        if failure.code != "no_answer":
            raise _in_the_sandbox(failure)
        message = _clip(failure.message, MAX_ERROR_CHARS)
        content = "Error: " + message
        metadata.setdefault("error", message)
    return AgentResult(content, list(outcome.tool_results), outcome.turns, metadata, outcome.usage)


def _in_the_sandbox(failure: Failure) -> BaseException:
    """The error to raise on the host for a failure in the container (the one table of
    codes: a code the table does not know is the sandbox's own failure)."""
    # The program wrote these words: keep a line's worth, never megabytes.
    code, message = failure.code[:64], _clip(failure.message, MAX_ERROR_CHARS)
    if code in ("cancelled", "budget"):
        return Failure(code, message).error()
    error = Failure(code, f"in the sandbox: {message}").error()
    if type(error) is JarvisError:  # no code of the table: say it is the sandbox's
        return SandboxError(f"the sandboxed agent failed ({code!r}): {message}")
    return error


def _clip(text: str, limit: int) -> str:
    return (
        text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} more characters]"
    )


def sandboxed_agent(key: str, spec: AgentSpec, config: Config, engine: Engine) -> BaseAgent:
    """What ``jarvisd.runs.build_agent`` returns for ``isolation="sandbox"``: agent ``key``
    in the sandbox. Mounts are checked when the run starts (MountRefused)."""
    AgentRegistry.get(key)  # an unknown agent fails here, on the host, clearly
    inner = dataclasses.replace(spec, agent=key)
    max_tokens = spec.max_tokens or config.agent.max_tokens
    return SandboxedAgent(engine, spec.model, spec=inner, config=config, max_tokens=max_tokens)
