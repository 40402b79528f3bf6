"""Built-in tools that need the outside world: memory retrieval, a sub-model call and
reading files under allowed roots."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .._errors import ToolError
from .._messages import Message, SamplingOptions, ToolSpec
from .._runcontext import RunContext
from ._base import BaseTool, current_run

if TYPE_CHECKING:
    from ..engines import Engine
    from ..memory import MemoryStore

__all__ = ["FileReadTool", "LLMTool", "RetrievalTool"]


class RetrievalTool(BaseTool):
    tool_id: ClassVar[str] = "retrieval"
    blocking: ClassVar[bool] = True

    def __init__(self, store: MemoryStore | None = None, k: int = 5) -> None:
        self.store = store  # a MemoryStore; the default one opens on first use
        self.k = k

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="retrieval",
            description="Search saved memories (notes, documents) for text relevant to a query.",
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to search for."},
                    "k": {"type": "integer", "description": "How many results (default 5)."},
                },
                "required": ["query"],
            },
        )

    def execute(self, **params: Any) -> str:
        if self.store is None:
            from ..memory import MemoryStore

            self.store = MemoryStore()
        k = max(1, min(int(params.get("k") or self.k), 50))
        hits = self.store.search(str(params["query"]), k)
        if not hits:
            return "No memories match that query."
        return "\n\n".join(f"[{i}] {hit.text}" for i, hit in enumerate(hits, 1))


class LLMTool(BaseTool):
    """Ask a (sub-)model through the run's engine: same budget, same cancel token."""

    tool_id: ClassVar[str] = "llm"

    def __init__(self, engine: Engine, model: str = "", max_tokens: int = 512) -> None:
        self.engine = engine
        self.model = model
        self.max_tokens = max_tokens

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="llm",
            description="Ask a language model a self-contained question and get its answer.",
            parameters={
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "description": "The complete question."},
                    "system": {"type": "string", "description": "Optional instructions."},
                },
                "required": ["prompt"],
            },
        )

    async def execute(self, **params: Any) -> str:
        from ..engines import RunEngine

        run = current_run()
        child = run.child() if run is not None else RunContext()
        messages = [Message.user(str(params["prompt"]))]
        if params.get("system"):
            messages.insert(0, Message.system(str(params["system"])))
        generation = await RunEngine.bind(self.engine, child).generate(
            messages,
            model=self.model,
            options=SamplingOptions(temperature=0.3, max_tokens=self.max_tokens),
        )
        return generation.content.strip()


class FileReadTool(BaseTool):
    """Read a text file under one of the allowed roots. The path is resolved (symlinks
    followed) before the check, and the opened file descriptor is checked again, so a
    link that points outside, or one swapped in after the check, is refused."""

    tool_id: ClassVar[str] = "file_read"
    blocking: ClassVar[bool] = True

    def __init__(self, roots: Sequence[str | Path] = (), max_bytes: int = 1_000_000) -> None:
        self.roots = [Path(r).expanduser().resolve() for r in roots]
        self.max_bytes = max_bytes

    @property
    def spec(self) -> ToolSpec:
        roots = ", ".join(map(str, self.roots)) or "none configured"
        return ToolSpec(
            name="file_read",
            description=f"Read a text file. Allowed directories: {roots}.",
            parameters={
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Path of the file."}},
                "required": ["path"],
            },
        )

    def _inside(self, path: Path) -> bool:
        return any(path == root or path.is_relative_to(root) for root in self.roots)

    def check(self, raw: str) -> Path:
        """The resolved path, or ToolError saying why it is refused."""
        if not self.roots:
            raise ToolError(
                "file_read has no allowed roots: set tools.file_read_roots in the config"
            )
        if "\x00" in raw:
            raise ToolError("path contains a NUL byte")
        path = Path(raw).expanduser()
        if not path.is_absolute():
            path = self.roots[0] / path
        try:
            resolved = path.resolve(strict=True)
        except FileNotFoundError:
            raise ToolError(f"no such file: {raw}") from None
        except (OSError, RuntimeError) as exc:
            raise ToolError(f"cannot resolve {raw}: {exc}") from None
        if not self._inside(resolved):
            allowed = ", ".join(map(str, self.roots))
            raise ToolError(
                f"refused: {raw} resolves to {resolved}, outside the allowed roots ({allowed})"
            )
        return resolved

    def execute(self, **params: Any) -> str:
        raw = str(params["path"])
        resolved = self.check(raw)
        run = current_run()
        if run is not None and run.read_buffer is not None:
            # The editor's text of an allowed file (unsaved changes included).
            text = run.read_buffer(str(resolved))
            if text is not None:
                return text.encode()[: self.max_bytes].decode("utf-8", "ignore")
        # O_NONBLOCK: opening a FIFO (or a device) must not block the worker thread
        # forever; such files are refused below.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(resolved, flags)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ToolError(f"refused: {raw} changed into a symlink") from None
            raise ToolError(f"cannot open {raw}: {exc.strerror}") from None
        try:
            real = (
                Path(os.path.realpath(f"/proc/self/fd/{fd}"))
                if Path("/proc/self/fd").exists()
                else resolved
            )
            if not self._inside(real):
                raise ToolError(f"refused: {raw} is outside the allowed roots")
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f"not a regular file: {raw}")
        except BaseException:
            os.close(fd)
            raise
        size = info.st_size
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(self.max_bytes)
        text = data.decode("utf-8", errors="replace")
        if size > self.max_bytes:
            text += f"\n[truncated: the file has {size} bytes; showing the first {self.max_bytes}]"
        return text
