"""NativeOpenHandsAgent (CodeAct): the model writes Python in ```python blocks; each
block is a cell of one persistent REPL session for the whole run (``_repl``: one
sandbox container, bwrap sandbox or host process, started through the code-executor
seam ``executor_for(config)``), so variables, imports and files in /tmp carry over from
cell to cell, as in OpenHands' IPython kernel. Its output comes back as the observation.
Tools are also callable with Action / Action Input lines. A reply with neither code nor a
call is the answer, as in OpenHands' CodeAct.

URLs in the task are fetched and inlined only when ``tools.allow_network`` is true.
The history is fitted to the engine's real context length by the shared loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from .._claims import claims_change
from .._messages import Generation, Message, ToolCall, ToolResult, ToolSpec
from .._runcontext import RunContext
from .._toolcalls import recover_tool_calls, starts_like_a_call
from ..executors import CodeExecutor
from ..tools import BaseTool, ToolDispatcher
from ._base import AgentContext, strip_think_tags
from ._parsing import (
    code_blocks,
    final_before_code,
    final_before_code_so_far,
    parse_react,
    tool_descriptions,
)
from ._repl import ReplSession, note_restart
from ._toolloop import Dialect, LoopSetup, LoopState, Step, ToolUsingAgent

__all__ = ["CodeActDialect", "NativeOpenHandsAgent", "PythonTool", "prefetch_urls"]

_URL = re.compile(r"https?://[^\s<>\"')\]]+")
_TAGS = re.compile(r"<(script|style)[^>]*>.*?</\1>|<[^>]+>", re.DOTALL | re.IGNORECASE)


def clip_output(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... output truncated: {len(text) - limit} more characters]"


def _is_json(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict | list)
    except ValueError:
        return False


class PythonTool(BaseTool):
    """Runs one cell in the run's persistent REPL session."""

    tool_id: ClassVar[str] = "python"

    def __init__(self, session: ReplSession) -> None:
        self.session = session
        # The session stops the cell at exec_timeout; this is only the backstop.
        self.timeout = session.exec_timeout + 30

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            "python",
            "Run Python 3 code in a persistent session and return its output.",
            {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
        )

    async def execute(self, **params: Any) -> ToolResult:
        result = await self.session.execute(str(params["code"]))
        out = result.stdout.strip() or "(no output)"
        if result.error:
            out += f"\n{result.error}"
        return ToolResult("python", out, not result.error)


#: The file helpers of the session (``runners.file_helpers``), as the prompt names them.
FILE_HELPERS_PROMPT = (
    "these helpers are ready: view(path, start=1, end=None) prints a file's lines with "
    "their numbers; replace(path, old, new) replaces the one exact occurrence of the "
    "snippet old (copy it from view, without the line numbers) with new, and refuses 0 "
    "or several; run(command, cwd=None) runs a shell command and prints its exit status "
    "and output; define_in(path, code) puts the functions and classes code defines into "
    "the file in place of those of the same names."
)

CODEACT_PROMPT = """You solve tasks by writing and running Python code.
- To run code, write one block:
```python
print(...)
```
  It runs in a persistent Python 3 session: variables, imports and files in /tmp stay
  from one block to the next. You see what it prints (print the values you need).
{helpers}- You may also call a tool:
Action: <tool name>
Action Input: <JSON arguments>
{tools}- When you know the answer, reply with:
Final Answer: <the answer>"""


class CodeActDialect(Dialect):
    stop = ("\nObservation:",)
    # "Final Answer:" before any code fence is the answer: it streams from its marker on.
    answer_so_far = staticmethod(final_before_code_so_far)

    #: Whether the session has the file helpers (named in the prompt).
    file_helpers: bool = False

    def system_prompt(self, executor: ToolDispatcher) -> str | None:
        specs = [s for s in executor.specs if s.name != "python"]
        tools = f"  Tools:\n{tool_descriptions(specs)}\n" if specs else ""
        helpers = f"- In the session, {FILE_HELPERS_PROMPT}\n" if self.file_helpers else ""
        return CODEACT_PROMPT.format(tools=tools, helpers=helpers)

    def parse(self, generation: Generation, executor: ToolDispatcher) -> Step:
        content = strip_think_tags(generation.content)
        answer = final_before_code(content)
        if answer is not None:
            return Step("final", answer)
        # A fence holding only a JSON object is a tool call written as JSON (small models
        # do this), never a program worth running: the recovery below reads it.
        blocks = [b for b in code_blocks(content, bare=True) if not _is_json(b)]
        parsed = parse_react(content)
        if blocks:
            code = "\n\n".join(blocks)
            return Step("calls", content, (ToolCall.from_arguments("python", {"code": code}),))
        if parsed.action is not None:
            name = executor.resolve(parsed.action) or parsed.action
            return Step(
                "calls", parsed.kept, (ToolCall(name=name, arguments=parsed.action_input or "{}"),)
            )
        if parsed.final is not None:
            return Step("final", parsed.final)
        names = [n for n in executor.names if n != "python"]
        calls, _ = recover_tool_calls(content, names)
        if calls:
            return Step("calls", content, tuple(calls), recovered=True)
        if not content:
            return Step("invalid", error="the reply was empty")
        if starts_like_a_call(content):
            return Step("invalid", error="it looks like a tool call but could not be read")
        # As in OpenHands' CodeAct: a reply with no code and no call is the message to
        # the user, so it ends the run as the answer.
        return Step("final", content)

    def corrective(self, step: Step) -> str:
        return (
            f"Your last reply could not be used: {step.error}. Either write a ```python "
            "code block to run, or reply with 'Final Answer: <answer>'."
        )


#: What CPython's parser raises on a deep expression (3,000 unary minuses: RecursionError;
#: 10,000: MemoryError), as a small model's degenerate reply can hold: not code to read.
def _only_defines(step: Step) -> bool:
    """Whether the step runs one Python block that only defines functions or classes
    (and imports): it shows code, it changes no file."""
    if len(step.calls) != 1 or step.calls[0].name != "python":
        return False
    import ast

    from jarvisd._pysource import parse_module

    try:
        code = str(step.calls[0].arguments_dict().get("code") or "")
    except AttributeError:
        return False
    tree = parse_module(code)
    if tree is None:
        return False
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    return bool(tree.body) and all(isinstance(node, kinds) for node in tree.body)


#: A block's first line naming its file ("# /ws/calc.py", "# file: /ws/calc.py"), or the
#: line before its fence doing so ("**/ws/calc.py:**", "In /ws/calc.py:").
_LABEL_COMMENT = re.compile(r"^\s*#\s*(?:file(?:name)?\s*:\s*)?([^\s'\"`*:]+\.py)\s*$")
_LABEL_LINE = re.compile(r"([^\s'\"`*:(]+\.py)\b")


def _block_defines_only(code: str) -> bool:
    import ast

    from jarvisd._pysource import parse_module

    tree = parse_module(code)
    if tree is None:
        return False
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    return any(not isinstance(n, ast.Import | ast.ImportFrom) for n in tree.body) and all(
        isinstance(n, kinds) for n in tree.body
    )


def _defined_into_files(step: Step, content: str, root: str = "") -> Step:
    """``step`` with each block that only defines code under a file's name (absolute, or
    relative to ``root``: its first comment line, or the line before its fence) put into
    that file by
    ``define_in`` instead of run: the fixed function a small model shows, believing it
    saved (run, it would only define it in the session, or fail on the file's imports,
    which resolve beside the file, not in the session)."""
    if len(step.calls) != 1 or step.calls[0].name != "python":
        return step
    blocks = [b for b in code_blocks(content, bare=True) if not _is_json(b)]
    parts, changed, pos = [], False, 0
    for block in blocks:
        at = content.find(block, pos)
        before = content[pos:at] if at >= 0 else ""
        pos = at + len(block) if at >= 0 else pos
        lines = [line for line in before.splitlines() if line.strip() and "```" not in line]
        first = block.lstrip("\n").splitlines()[0]
        label = _LABEL_COMMENT.match(first)
        named = label.group(1) if label else None
        if named is None and lines:
            found = _LABEL_LINE.findall(lines[-1])
            named = found[-1] if found else None
        if named is not None and not named.startswith("/"):
            named = f"{root.rstrip('/')}/{named}" if root else None  # relative: to the root
        if named is not None and _block_defines_only(block):
            parts.append(f"define_in({named!r}, {block!r})")
            changed = True
        else:
            parts.append(block)
    if not changed:
        return step
    call = ToolCall.from_arguments("python", {"code": "\n\n".join(parts)})
    return Step("calls", step.content, (call,))


#: The word for a reply that claims work when no code ran (read by ``corrective``).
_UNACTED = "claimed work without acting"


class SessionDialect(CodeActDialect):
    """CodeAct with its session: a resumed run is told its session is new.

    With ``reask_unacted``, a reply that ends the run claiming a change ("I changed the
    function...") when no code has run in the session is asked once to act: small
    models describe a fix they never made. A second such reply is the answer.

    With ``reask_unacted`` too, a reply that claims a change and shows again only code
    that has run already ("I changed dasherize. The new function: ```python ...```")
    is the summary, not a call: run again it would be blocked as a repeat, and the
    same reply to the turn that asks for the answer ended the run as an error, the
    change made (the codefix yardstick's inflection run on 1.5B)."""

    def __init__(self, session: ReplSession, *, reask_unacted: bool = False) -> None:
        self.session = session
        self.file_helpers = session.file_helpers
        self.reask_unacted = reask_unacted
        self.acted = False
        self.reasked = False
        self.ran: set[str] = set()  # the code of the calls parsed so far

    def parse(self, generation: Generation, executor: ToolDispatcher) -> Step:
        step = super().parse(generation, executor)
        if step.kind == "calls" and self.reask_unacted and self.file_helpers:
            root = getattr(self.session, "cwd", "")
            step = _defined_into_files(step, strip_think_tags(generation.content), root)
        if step.kind == "calls" and self.reask_unacted:
            codes = {c.arguments for c in step.calls}
            content = strip_think_tags(generation.content)
            if self.acted and codes <= self.ran and claims_change(content):
                return Step("final", content)
            self.ran |= codes
        if step.kind == "calls":
            # A block that only defines things (the fixed function shown as code) changes
            # nothing outside the session: it is not acting.
            self.acted = self.acted or not (self.reask_unacted and _only_defines(step))
        elif (
            step.kind == "final"
            and self.reask_unacted
            and not self.acted
            and not self.reasked
            and claims_change(step.content)
        ):
            self.reasked = True
            return Step("invalid", error=_UNACTED)
        return step

    def result_messages(self, step: Step, results: Sequence[ToolResult]) -> list[Message]:
        messages = super().result_messages(step, results)
        if self.reask_unacted and _only_defines(step) and messages:
            how = " with replace(path, old, new)" if self.file_helpers else ""
            note = (
                "\n[This block only defined code in the session: no file changed. To "
                f"change a file, write it{how}.]"
            )
            messages[-1] = Message.user(messages[-1].content + note)
        return messages

    def corrective(self, step: Step) -> str:
        if step.error != _UNACTED:
            return super().corrective(step)
        # Told only to "write a block", 1.5B repeated its claim word for word: it is
        # shown the block to write.
        example = (
            "\n```python\nreplace('/absolute/path/of/the/file.py', 'the exact old lines', "
            "'the new lines')\n```\n"
            if self.file_helpers
            else " "
        )
        return (
            "You said you made a change, but no code has run in this session, so nothing "
            "has changed yet. Reply with only a ```python code block that makes the change, "
            f"such as:{example}Reply with your summary once the change is made."
        )

    async def resume(self, state: LoopState, run: RunContext) -> None:
        # The session's memory is not saved with the checkpoint, and no cell runs again
        # to rebuild it (its effects would happen twice): the model is told instead.
        note_restart(state)


async def prefetch_urls(
    text: str, *, limit: int = 3, max_chars: int = 4000, fetch_timeout: float = 10.0
) -> str:
    """``text`` with the content of the URLs in it appended (network access needed)."""
    urls = list(dict.fromkeys(_URL.findall(text)))[:limit]
    if not urls:
        return text
    import httpx

    parts = [text]
    async with httpx.AsyncClient(timeout=fetch_timeout, follow_redirects=True) as client:
        for url in urls:
            try:
                response = await client.get(url)
                response.raise_for_status()
                body = _TAGS.sub(" ", response.text)
                body = re.sub(r"\s+", " ", body).strip()
                parts.append(f"Content of {url}:\n{clip_output(body, max_chars)}")
            except httpx.HTTPError as exc:
                parts.append(f"(Could not fetch {url}: {exc})")
    return "\n\n".join(parts)


class NativeOpenHandsAgent(ToolUsingAgent):
    """CodeAct: writes Python that runs through the code executor (sandbox)."""

    agent_id: ClassVar[str] = "native_openhands"
    runs_code: ClassVar[bool] = True
    fetches_urls: ClassVar[bool] = True

    def __init__(
        self,
        *args: Any,
        executor: CodeExecutor | None = None,
        allow_network: bool | None = None,
        exec_timeout: float = 30.0,
        session_timeout: float = 3600.0,
        max_output_chars: int = 10_000,
        file_helpers: bool = True,
        reask_unacted: bool = False,
        work_dir: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        #: view / replace / run in the session, named in the prompt.
        self.file_helpers = file_helpers
        #: Re-ask once a reply that claims a change when no code ran (jarvis code sets it).
        self.reask_unacted = reask_unacted
        #: Where the session's code starts, and relative file names resolve (jarvis code
        #: sets its workspace).
        self.work_dir = work_dir
        self.code_executor = executor
        self.allow_network = allow_network
        self.exec_timeout = exec_timeout
        self.session_timeout = session_timeout
        self.max_output_chars = max_output_chars

    def dialect(self) -> Dialect:
        return CodeActDialect()

    async def _setup(self, input: str, context: AgentContext | None, run: RunContext) -> LoopSetup:
        code_executor, allow_network = self.code_executor, self.allow_network
        if code_executor is None or allow_network is None:
            from .._config import load_config
            from ..executors import executor_for

            config = load_config()
            code_executor = code_executor or executor_for(config)
            allow_network = config.tools.allow_network if allow_network is None else allow_network
        await code_executor.check()  # no sandbox: say so before spending a model turn
        metadata: dict[str, Any] = {"executor": code_executor.name}
        task = input
        if _URL.search(input):
            if allow_network:
                task = await prefetch_urls(input)
                metadata["url_prefetch"] = True
            else:
                metadata["url_prefetch"] = "skipped: tools.allow_network is false"
        session = ReplSession(
            code_executor,
            exec_timeout=self.exec_timeout,
            session_timeout=self.session_timeout,
            max_output_bytes=self.max_output_chars,
            file_helpers=self.file_helpers,
            cwd=self.work_dir,
        )
        await session.prepare()
        dialect = SessionDialect(session, reask_unacted=self.reask_unacted)
        executor = self._executor([PythonTool(session)])
        messages = self._build_messages(
            task, context, system_prompt=self._system(dialect.system_prompt(executor))
        )
        return LoopSetup(dialect, executor, messages, close=session.close, metadata=metadata)
