"""RLMAgent (Recursive Language Model): the context lives as the variable ``context``
in a persistent Python REPL running in its own process (``runners.repl`` through the
shared :class:`~jarvisd.agents._repl.ReplSession`, started through the code-executor
seam: never ``exec`` in the agent's process). The root model
writes code to inspect and split it and asks sub-models with ``llm_query`` /
``llm_batch``; it ends with ``FINAL(value)`` or ``FINAL_VAR("name")``.

Sub-calls are answered by the host through the run's engine: same budget, same cancel
token, ``run.child()``. ``llm_batch`` calls run concurrently. A sub-call that passes a
``context`` runs as a nested RLM while ``depth + 1 < max_depth``, else as a plain model
call. Every execution has a timeout on its own running time (time spent waiting for
sub-call answers is not counted): past it the cell is killed and the REPL goes on with
its state from before that cell (``_repl``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from .._messages import Generation, Message, ToolCall, ToolResult, ToolSpec
from .._runcontext import RunContext
from ..executors import CodeExecutor
from ..tools import BaseTool, ToolDispatcher
from ._base import AgentContext, strip_think_tags
from ._parsing import code_blocks, final_answer, tool_descriptions
from ._repl import ReplSession, note_restart
from ._toolloop import Dialect, LoopSetup, LoopState, Step, ToolUsingAgent

__all__ = ["RLMAgent", "RLMDialect"]

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


class ReplTool(BaseTool):
    tool_id: ClassVar[str] = "repl"

    def __init__(self, session: ReplSession) -> None:
        self.session = session
        # Only a backstop: the session's own timeouts fire first. A cell may run longer
        # than exec_timeout in wall time while its sub-calls are being answered.
        self.timeout = max(session.exec_timeout, session.session_timeout) + 30

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            "repl",
            "Run Python in the persistent REPL.",
            {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
        )

    async def execute(self, **params: Any) -> ToolResult:
        result = await self.session.execute(str(params["code"]))
        text = result.stdout.rstrip() or "(no output)"
        if result.error:
            text += f"\nError:\n{result.error}"
        meta = {"final": result.final} if result.final is not None else {}
        return ToolResult("repl", text, not result.error, metadata=meta)


class RLMDialect(Dialect):
    def __init__(self, context_chars: int, chunk: int, session: ReplSession | None) -> None:
        self.context_chars = context_chars
        self.chunk = chunk
        self.session = session

    def system_prompt(self, executor: ToolDispatcher) -> str | None:
        specs = [s for s in executor.specs if s.name != "repl"]
        tools = (
            f"\nOther tools (call them as functions is NOT possible; describe needs in llm_query):\n{tool_descriptions(specs)}"
            if specs
            else ""
        )
        return RLM_PROMPT.format(length=self.context_chars, chunk=self.chunk, tools=tools)

    def parse(self, generation: Generation, executor: ToolDispatcher) -> Step:
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
        # The REPL's memory is not saved with the checkpoint, and no cell runs again to
        # rebuild it (its sub-calls and effects would happen twice): the model is told
        # that the session is new, with `context` and `question` set again.
        kept = sorted(self.session.variables) if self.session is not None else []
        note_restart(state, kept)


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

    async def sub_call(self, run: RunContext, request: Mapping[str, Any]) -> str:
        """Answer one ``llm_query`` from the REPL."""
        prompt = str(request.get("prompt", ""))
        context = request.get("context")
        child = run.child()
        if context is not None and child.depth < self.max_depth:
            nested = type(self)(
                self.engine,
                self.sub_model or self.model,
                tools=self.tools,
                temperature=self.sub_temperature,
                max_tokens=self.sub_max_tokens,
                max_turns=self.max_turns,
                executor=self.code_executor,
                sub_model=self.sub_model,
                sub_temperature=self.sub_temperature,
                sub_max_tokens=self.sub_max_tokens,
                max_output_chars=self.max_output_chars,
                exec_timeout=self.exec_timeout,
                max_depth=self.max_depth,
                chunk_chars=self.chunk_chars,
            )
            result = await nested.arun(
                prompt, AgentContext(metadata={"context": str(context)}), run=child
            )
            return result.content
        text = prompt if context is None else f"{prompt}\n\n{context}"
        generation = await self._generate(
            child,
            [Message.user(text)],
            model=self.sub_model or self.model,
            temperature=self.sub_temperature,
            max_tokens=self.sub_max_tokens,
        )
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
        session = ReplSession(
            code_executor,
            exec_timeout=self.exec_timeout,
            session_timeout=self.session_timeout,
            max_output_bytes=self.max_output_chars,
            variables={"context": text, "question": input},
            answer=functools.partial(self.sub_call, run),
        )
        await session.prepare()
        dialect = RLMDialect(len(text), await self._chunk_size(), session)
        executor = self._executor([ReplTool(session)])
        messages = self._build_messages(
            input, None, system_prompt=self._system(dialect.system_prompt(executor))
        )
        if context is not None:
            messages[-1:-1] = context.conversation
        return LoopSetup(
            dialect,
            executor,
            messages,
            close=session.close,
            metadata={"context_chars": len(text), "executor": code_executor.name},
        )
