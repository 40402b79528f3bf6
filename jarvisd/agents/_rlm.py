"""RLMAgent (Recursive Language Model): the context lives as the variable ``context``
in a persistent Python REPL running in its own process (``runners.rlm_repl``, started
through the code-executor seam: never ``exec`` in the agent's process). The root model
writes code to inspect and split it and asks sub-models with ``llm_query`` /
``llm_batch``; it ends with ``FINAL(value)`` or ``FINAL_VAR("name")``.

Sub-calls are answered by the host through the run's engine: same budget, same cancel
token, ``run.child()``. ``llm_batch`` calls run concurrently. A sub-call that passes a
``context`` runs as a nested RLM while ``depth + 1 < max_depth``, else as a plain model
call. Every execution has a timeout on its own running time (time spent waiting for
sub-call answers is not counted): past it the host kills the REPL, says so, and starts
a fresh one (with ``context`` again) for the next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from .._errors import JarvisError, ProtocolError
from .._messages import Generation, Message, ToolCall, ToolResult, ToolSpec
from .._run import RunContext, RunStopped
from ..executors import Channel, Clock, CodeExecutor, ExecRequest, receive_frame, send_frame
from ..protocol import ErrorFrame, FrameError, Infer, InferResult, ResultFrame, Start
from ..tools import BaseTool, ToolExecutor
from ._base import AgentContext, strip_think_tags
from ._parsing import code_blocks, final_answer, tool_descriptions
from ._toolloop import Dialect, LoopSetup, LoopState, Step, ToolUsingAgent

__all__ = ["RLMAgent", "RLMDialect", "ReplSession"]

log = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parent.parent.parent  # holds jarvisd/ and runners/
#: Sub-calls of one REPL answered at once, and waiting in all: the REPL runs the model's
#: code, so a flood of ``llm_batch`` prompts is refused past the second bound.
MAX_CONCURRENT_SUB_CALLS = 8
MAX_PENDING_SUB_CALLS = 256

RLM_PROMPT = """You answer a question about a long text that you cannot read directly. It is stored in
a Python REPL as the variable `context` (a string of {length} characters); the question is
in the variable `question`. Write Python in a ```python block; you will see what it
prints. Variables persist between blocks.
Available in the REPL:
- llm_query(prompt) -> str: ask a language model; include the piece of text it should read
  in the prompt, e.g. llm_query("Find the secret code in: " + context[:3000]).
- llm_batch(prompts) -> list[str]: ask several prompts at once (much faster than a loop).
- FINAL(value): finish with this answer. FINAL_VAR("name"): finish with a variable's value.
Look at the text in chunks of at most {chunk} characters, ask llm_query about the chunks,
combine the answers, and call FINAL(...) with the result. For example:
```python
chunks = [context[i:i + {chunk}] for i in range(0, len(context), {chunk})]
answers = llm_batch([question + " Answer from this text only, or say NONE. Text: " + c for c in chunks])
found = [a for a in answers if "NONE" not in a.upper()]
print(found)
```
and then, once the answer is clear:
```python
FINAL(found[0])
```{tools}"""


class ReplSession:
    """One REPL process for one agent run."""

    def __init__(
        self,
        agent: RLMAgent,
        run: RunContext,
        context: str,
        executor: CodeExecutor,
        question: str = "",
    ) -> None:
        self.agent = agent
        self.run = run
        self.context = context
        self.question = question
        self.executor = executor
        self.channel: Channel | None = None
        self.noise: list[str] = []
        self._write_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_SUB_CALLS)
        self.restarts = 0

    async def _open(self) -> Channel:
        if self.channel is not None:
            return self.channel
        python = "python3" if self.executor.isolated else sys.executable
        env = {} if self.executor.isolated else {"PYTHONPATH": str(_ROOT)}
        request = ExecRequest(
            argv=[python, "-m", "runners.rlm_repl"], env=env, timeout=self.agent.session_timeout
        )
        channel = await self.executor.open(request)
        self.channel = channel
        init = Start(
            task="init",
            payload={
                "context": self.context,
                "question": self.question,
                "max_output_chars": self.agent.max_output_chars,
            },
        )
        await send_frame(channel, init)
        reply = await self._next(channel)
        if not isinstance(reply, ResultFrame):
            await self.close()
            raise ProtocolError(f"the RLM REPL did not start: {self._why(reply)}")
        return channel

    async def _next(self, channel: Channel) -> Any:
        try:
            return await receive_frame(channel, self.noise)
        except FrameError as exc:
            raise ProtocolError(f"bad frame from the RLM REPL: {exc}") from exc

    def _why(self, frame: Any) -> str:
        if isinstance(frame, ErrorFrame):
            return f"{frame.code}: {frame.message}"
        tail = "\n".join(self.noise[-5:])
        return f"the process ended ({tail or 'no output'})"

    async def close(self) -> None:
        channel, self.channel = self.channel, None
        if channel is not None:
            await channel.kill("closed")
            result = await channel.wait()
            if result.stderr.strip():
                log.debug("rlm repl stderr: %s", result.stderr[-2000:])

    async def _send(self, channel: Channel, frame: Any) -> None:
        async with self._write_lock:
            await send_frame(channel, frame)

    async def _answer(self, channel: Channel, frame: Infer) -> None:
        try:
            async with self._slots:
                content = await self.agent.sub_call(self.run, frame.request)
            reply = InferResult(id=frame.id, generation={"content": content})
        except RunStopped:
            raise
        except JarvisError as exc:
            reply = InferResult(id=frame.id, error=str(exc))
        with contextlib.suppress(JarvisError, OSError):
            await self._send(channel, reply)

    async def execute(self, code: str) -> dict[str, Any]:
        """Run one cell; returns the REPL's result dict (stdout, error, final)."""
        channel = await self._open()
        start = Start(task="exec", payload={"code": code})
        await self._send(channel, start)
        tasks: set[asyncio.Task[None]] = set()
        try:
            return await self._serve_cell(channel, start.id, tasks)
        except TimeoutError:
            await self.close()
            self.restarts += 1
            return {"stdout": "", "final": None, "error": (
                f"execution timed out after {self.agent.exec_timeout:g} s of running time and "
                "the REPL was restarted: variables from earlier steps are gone (`context` is "
                "still there)."
            )}  # fmt: skip
        except BaseException:
            await self.close()
            raise
        finally:
            for task in tasks:
                task.cancel()
            if tasks:
                results = await asyncio.gather(*tasks, return_exceptions=True)
                for outcome in results:
                    if isinstance(outcome, RunStopped):
                        raise outcome

    async def _serve_cell(
        self, channel: Channel, start_id: str, tasks: set[asyncio.Task[None]]
    ) -> dict[str, Any]:
        """Answer the cell's sub-calls until its result comes. The timeout counts the
        cell's own running time: the clock stops while the REPL waits for answers to
        ``llm_query`` / ``llm_batch``, so a slow local model answering them does not
        kill a cell that is doing its job."""
        loop = asyncio.get_running_loop()
        clock, live = Clock(self.agent.exec_timeout), True

        def answered(_: object) -> None:
            clock.release()
            left = clock.remaining()
            if left is not None and live:  # no sub-call out: the cell's clock runs again
                deadline.reschedule(loop.time() + left)

        try:
            async with asyncio.timeout(clock.timeout) as deadline:
                while True:
                    frame = await self._next(channel)
                    for task in [t for t in tasks if t.done()]:
                        tasks.discard(task)
                        task.result()  # a stop signal (budget, cancel) ends the run
                    if isinstance(frame, Infer) and len(tasks) >= MAX_PENDING_SUB_CALLS:
                        refusal = f"more than {MAX_PENDING_SUB_CALLS} sub-calls at once: refused"
                        await self._send(channel, InferResult(id=frame.id, error=refusal))
                    elif isinstance(frame, Infer):
                        clock.hold()  # the cell waits for the host meanwhile
                        deadline.reschedule(None)
                        task = asyncio.ensure_future(self._answer(channel, frame))
                        task.add_done_callback(answered)
                        tasks.add(task)
                    elif isinstance(frame, ResultFrame) and frame.id == start_id:
                        return dict(frame.result)
                    elif frame is None or isinstance(frame, ErrorFrame):
                        why = self._why(frame)
                        await self.close()
                        self.restarts += 1
                        return {"stdout": "", "error": f"the REPL process died: {why}. A new one starts "
                                "on the next step; earlier variables are gone.", "final": None}  # fmt: skip
        finally:
            live = False  # the timeout is over: answers that come later leave it alone


class ReplTool(BaseTool):
    tool_id: ClassVar[str] = "repl"

    def __init__(self, session: ReplSession) -> None:
        self.session = session
        # Only a backstop: the session's own timeouts fire first. A cell may run longer
        # than exec_timeout in wall time while its sub-calls are being answered.
        agent = session.agent
        self.timeout = max(agent.exec_timeout, agent.session_timeout) + 30

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec("repl", "Run Python in the persistent REPL.",
                        {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]})  # fmt: skip

    async def execute(self, **params: Any) -> ToolResult:
        result = await self.session.execute(str(params["code"]))
        out = str(result.get("stdout") or "")
        error = result.get("error")
        final = result.get("final")
        text = out.rstrip() or "(no output)"
        if error:
            text += f"\nError:\n{error}"
        meta = {"final": final} if final is not None else {}
        return ToolResult("repl", text, not error, metadata=meta)


class RLMDialect(Dialect):
    def __init__(self, context_chars: int, chunk: int, session: ReplSession | None) -> None:
        self.context_chars = context_chars
        self.chunk = chunk
        self.session = session

    def system_prompt(self, executor: ToolExecutor) -> str | None:
        specs = [s for s in executor.specs if s.name != "repl"]
        tools = (
            f"\nOther tools (call them as functions is NOT possible; describe needs in llm_query):\n{tool_descriptions(specs)}"
            if specs
            else ""
        )
        return RLM_PROMPT.format(length=self.context_chars, chunk=self.chunk, tools=tools)

    def parse(self, generation: Generation, executor: ToolExecutor) -> Step:
        content = strip_think_tags(generation.content)
        blocks = code_blocks(content, bare=True)
        if blocks:
            return Step(
                "calls", content, (ToolCall.from_arguments("repl", {"code": "\n\n".join(blocks)}),)
            )
        final = final_answer(content, final_call=True)
        if final is not None:
            return Step("final", final)
        return Step("invalid", error="it has no ```python block and no FINAL(...)")

    def result_messages(self, step: Step, results: Sequence[ToolResult]) -> list[Message]:
        # Small models repeat their code unless told what comes next.
        output = "\n\n".join(r.content for r in results)
        return [
            Message.user(
                f"REPL output:\n{output}\n\nIf this output answers the question, reply with "
                "a ```python block that calls FINAL(...) with the answer. Otherwise write new "
                "code."
            )
        ]

    def corrective(self, step: Step) -> str:
        return (
            f"Your last reply could not be used: {step.error}. Write Python in a ```python "
            "block (the text is in the variable `context`), or finish with FINAL(answer)."
        )

    def final_from_results(self, results: Sequence[ToolResult]) -> str | None:
        for result in results:
            final = result.metadata.get("final")
            if final is not None:
                return str(final)
        return None

    async def resume(self, state: LoopState, run: RunContext) -> None:
        # Rebuild the REPL's variables by re-running the cells that ran before the
        # checkpoint (their sub-calls are asked again: the REPL's memory is not saved).
        # The history keeps the model's replies as text, so the cells are read back out
        # of them exactly as ``parse`` read them the first time.
        if self.session is None:
            return
        for cell in self.cells_of(state.messages):
            await self.session.execute(cell)

    @staticmethod
    def cells_of(messages: Sequence[Message]) -> list[str]:
        """The code each assistant reply in ``messages`` ran, in order."""
        cells = []
        for message in messages:
            if message.role == "assistant":
                blocks = code_blocks(strip_think_tags(message.content), bare=True)
                if blocks:
                    cells.append("\n\n".join(blocks))
        return cells


class RLMAgent(ToolUsingAgent):
    """Recursive LM: long context in a REPL process, sub-calls via llm_query."""

    agent_id: ClassVar[str] = "rlm"
    runs_code: ClassVar[bool] = True

    def __init__(
        self,
        *args: Any,
        executor: CodeExecutor | None = None,
        sub_model: str = "",
        sub_temperature: float = 0.3,
        sub_max_tokens: int = 1024,
        max_output_chars: int = 10_000,
        exec_timeout: float = 120.0,
        session_timeout: float = 3600.0,
        max_depth: int = 2,
        chunk_chars: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.code_executor = executor
        self.sub_model = sub_model
        self.sub_temperature = sub_temperature
        self.sub_max_tokens = sub_max_tokens
        self.max_output_chars = max_output_chars
        self.exec_timeout = exec_timeout
        self.session_timeout = session_timeout
        self.max_depth = max_depth
        self.chunk_chars = chunk_chars
        self._session: ReplSession | None = None

    def dialect(self) -> Dialect:
        return RLMDialect(0, self.chunk_chars or 4000, self._session)

    async def sub_call(self, run: RunContext, request: Any) -> str:
        """Answer one ``llm_query`` from the REPL."""
        prompt = str(request.get("prompt", ""))
        context = request.get("context")
        child = run.child()
        if context is not None and child.depth < self.max_depth:
            nested = type(self)(
                self.engine, self.sub_model or self.model, tools=self.tools, temperature=self.sub_temperature,
                max_tokens=self.sub_max_tokens, max_turns=self.max_turns, executor=self.code_executor,
                sub_model=self.sub_model, sub_temperature=self.sub_temperature,
                sub_max_tokens=self.sub_max_tokens, max_output_chars=self.max_output_chars,
                exec_timeout=self.exec_timeout, max_depth=self.max_depth, chunk_chars=self.chunk_chars,
            )  # fmt: skip
            result = await nested.arun(
                prompt, AgentContext(metadata={"context": str(context)}), run=child
            )
            return result.content
        text = prompt if context is None else f"{prompt}\n\n{context}"
        generation = await self._generate(
            child, [Message.user(text)], model=self.sub_model or self.model,
            temperature=self.sub_temperature, max_tokens=self.sub_max_tokens,
        )  # fmt: skip
        return strip_think_tags(generation.content)

    async def _chunk_size(self) -> int:
        if self.chunk_chars:
            return self.chunk_chars
        window = await self.engine.context_length(self.sub_model or self.model)
        if not window:
            return 8000
        # A chunk plus the question and the answer must fit the sub-model's window.
        return max(int((window - self.sub_max_tokens - 200) * 2.5), 500)

    async def _setup(self, input: str, context: AgentContext | None, run: RunContext) -> LoopSetup:
        text = ""
        if context is not None:
            if "context" in context.metadata:
                text = str(context.metadata["context"])
            elif context.memory_results:
                text = "\n\n".join(str(getattr(m, "text", m)) for m in context.memory_results)
        code_executor = self.code_executor
        if code_executor is None:
            from .._config import load_config
            from ..executors import executor_for

            code_executor = executor_for(load_config())
        await code_executor.check()  # no sandbox: say so before spending a model turn
        session = ReplSession(self, run, text, code_executor, question=input)
        dialect = RLMDialect(len(text), await self._chunk_size(), session)
        executor = self._executor([ReplTool(session)])
        messages = self._build_messages(
            input, None, system_prompt=self._system(dialect.system_prompt(executor))
        )
        if context is not None:
            messages[-1:-1] = context.conversation
        return LoopSetup(
            dialect, executor, messages, close=session.close,
            metadata={"context_chars": len(text), "executor": code_executor.name},
        )  # fmt: skip
